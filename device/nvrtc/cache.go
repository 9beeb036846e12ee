package nvrtc

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cohortml/cohort/device/internal/libfind"
)

// cache is the PTX directory. A file is a header line
// "// cohort ptx <sha256 of the rest>\n" followed by the PTX.
type cache struct{ dir string }

const cacheMagic = "// cohort ptx "

// CacheDir returns the directory the PTX cache uses for env.
func CacheDir(env libfind.Env) (string, error) {
	if env.CacheDir != "" {
		return filepath.Join(env.CacheDir, "ptx"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("nvrtc: cache: %w (set COHORT_CACHE_DIR)", err)
	}
	return filepath.Join(d, "cohort", "ptx"), nil
}

func newCache(dir string, env libfind.Env) (*cache, error) {
	if dir == "" {
		var err error
		if dir, err = CacheDir(env); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("nvrtc: cache: %w", err)
	}
	return &cache{dir: dir}, nil
}

func (c *cache) path(key string) string { return filepath.Join(c.dir, key+".ptx") }

// get returns the PTX for key. ok is false on a miss; err is set when an
// entry exists but is corrupt (the caller recompiles and overwrites it).
func (c *cache) get(key string) (ptx string, ok bool, err error) {
	b, err := os.ReadFile(c.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("nvrtc: cache: %w", err)
	}
	head, body, found := bytes.Cut(b, []byte("\n"))
	sum := sha256.Sum256(body)
	if !found || !bytes.HasPrefix(head, []byte(cacheMagic)) || string(head[len(cacheMagic):]) != hex.EncodeToString(sum[:]) {
		return "", false, fmt.Errorf("nvrtc: cache: %s is corrupt (checksum mismatch); recompiled", c.path(key))
	}
	return string(body), true, nil
}

// put writes the entry atomically: a temporary file in the same directory,
// synced, then renamed over the final name.
func (c *cache) put(key, ptx string) error {
	sum := sha256.Sum256([]byte(ptx))
	f, err := os.CreateTemp(c.dir, key+".tmp*")
	if err != nil {
		return fmt.Errorf("nvrtc: cache: %w", err)
	}
	_, err = fmt.Fprintf(f, "%s%s\n%s", cacheMagic, hex.EncodeToString(sum[:]), ptx)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(key))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("nvrtc: cache: %w", err)
	}
	return nil
}
