package mpi

import (
	"errors"
	"testing"
)

// The MPICH table cannot be checked against a library here (only Open MPI
// is installed); these are the values of MPICH's mpi.h, whose layout
// encodes the kind in the top byte and the element size in bits 8-15.
func TestMPICHHandles(t *testing.T) {
	h := mpichHandles
	for _, c := range []struct {
		name       string
		v          uintptr
		kind, size uintptr
	}{
		{"MPI_FLOAT", h.Float, 0x4c, 4},
		{"MPI_DOUBLE", h.Double, 0x4c, 8},
		{"MPI_INT64_T", h.Int64, 0x4c, 8},
		{"MPI_UINT16_T", h.Uint16, 0x4c, 2},
		{"MPI_BYTE", h.Byte, 0x4c, 1},
	} {
		if k, s := c.v>>24, c.v>>8&0xff; k != c.kind || s != c.size {
			t.Errorf("%s = %#x: kind %#x size %d, want kind %#x size %d", c.name, c.v, k, s, c.kind, c.size)
		}
	}
	for name, v := range map[string]uintptr{"MPI_MAX": h.Max, "MPI_MIN": h.Min, "MPI_SUM": h.Sum, "MPI_PROD": h.Prod} {
		if v>>24 != 0x58 {
			t.Errorf("%s = %#x is not an MPICH op handle", name, v)
		}
	}
	if h.CommWorld != 0x44000000 || h.InPlace != ^uintptr(0) || h.StatusIgnore != 1 || h.ErrorsReturn != 0x54000001 {
		t.Errorf("MPICH magic values: %+v", h)
	}
}

func TestDetect(t *testing.T) {
	none := func(string) (uintptr, error) { return 0, errors.New("no symbol") }
	ompi := func(s string) (uintptr, error) {
		if s == "ompi_mpi_comm_world" {
			return 0x1000, nil
		}
		return 0, errors.New("no symbol")
	}
	for _, c := range []struct {
		name    string
		lookup  func(string) (uintptr, error)
		version string
		want    ABI
	}{
		{"openmpi", ompi, "Open MPI v4.1.4", OpenMPI},
		{"mpich", none, "MPICH Version:\t4.0.2\nMPICH Release date: ...", MPICH},
		{"intel", none, "Intel(R) MPI Library 2021.6 for Linux* OS", MPICH},
		{"cray", none, "MPI VERSION    : CRAY MPICH version 8.1.25", MPICH},
	} {
		got, err := detect(c.lookup, c.version)
		if err != nil || got != c.want {
			t.Errorf("%s: detect = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	if _, err := detect(none, "SomeOtherMPI 1.0"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("unknown library: err = %v, want ErrUnavailable", err)
	}
}

func TestOpenMPIHandlesMissingSymbol(t *testing.T) {
	_, err := openMPIHandles(func(s string) (uintptr, error) {
		if s == "ompi_mpi_op_prod" {
			return 0, errors.New("undefined")
		}
		return 0x10, nil
	})
	if !errors.Is(err, ErrUnavailable) || err == nil {
		t.Fatalf("err = %v, want ErrUnavailable naming ompi_mpi_op_prod", err)
	}
}

// TestLoad loads the installed library (skipping when there is none) and
// checks its handles resolve; it does not initialise MPI.
func TestLoad(t *testing.T) {
	l, err := Load()
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no MPI library: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %v: %q", l.Name, l.ABI, l.Version)
	if l.CommWorld == 0 || l.Float == 0 || l.Sum == 0 {
		t.Errorf("unresolved handles: %+v", l.Handles)
	}
	if l.ABI == OpenMPI && (l.InPlace != 1 || l.StatusIgnore != 0) {
		t.Errorf("Open MPI magic values: %+v", l.Handles)
	}
}
