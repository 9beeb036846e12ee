package checkpoint

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// writeAtomic writes path through write so that path either keeps its old
// content or holds the complete new one: the bytes go to a temporary file
// in the same directory, which is flushed, fsynced and closed, then
// renamed over path, and the directory is fsynced. On any error the
// temporary file is removed and path is untouched. wrap, when not nil,
// wraps the file's writer (tests inject failures there). It returns the
// byte count and the SHA-256 of what was written.
func writeAtomic(path string, wrap func(io.Writer) io.Writer, write func(w io.Writer) error) (n int64, sum string, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, tempPattern(base)) // its owner in its name: see leftovers.go
	if err != nil {
		return 0, "", fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
			err = fmt.Errorf("checkpoint: writing %s: %w", path, err)
		}
	}()
	var w io.Writer = f
	if wrap != nil {
		w = wrap(w)
	}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(w, h)}
	bw := bufio.NewWriterSize(cw, 1<<20)
	if err = write(bw); err != nil {
		return 0, "", err
	}
	if err = bw.Flush(); err != nil {
		return 0, "", err
	}
	if err = f.Chmod(0o644); err != nil { // CreateTemp makes it 0600
		return 0, "", err
	}
	if err = f.Sync(); err != nil {
		return 0, "", err
	}
	if err = f.Close(); err != nil {
		return 0, "", err
	}
	if err = os.Rename(tmp, path); err != nil {
		return 0, "", err
	}
	if err = syncDir(dir); err != nil {
		return 0, "", err
	}
	return cw.n, hex.EncodeToString(h.Sum(nil)), nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// syncDir fsyncs a directory so that renames and creations in it are
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// fileSHA256 returns the size and SHA-256 of the file at path.
func fileSHA256(path string) (int64, string, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
