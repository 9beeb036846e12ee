package tensor

// Row gathers and scatters: the kernels behind embedding lookups.

// IndexRows returns the rows idx[0], idx[1], … of the 2-D table w as a new
// [len(idx), w.Dim(1)] tensor. An index outside [0, w.Dim(0)) panics,
// naming it and the table shape.
func IndexRows(w *Tensor, idx []int64) *Tensor {
	if len(w.shape) != 2 {
		panicf("IndexRows: table shape %v, want 2-D", w.shape)
	}
	V, D := w.shape[0], w.shape[1]
	if w.buf != nil {
		checkRows("IndexRows", idx, V, w.shape)
		dev, be := deviceOf("IndexRows", w)
		out := NewOn(dev, len(idx), D)
		be.IndexRows(out, w, idx)
		return out
	}
	out := Empty(len(idx), D) // every row is copied in
	od := out.Data()
	wc := w.Contiguous()
	wd := wc.Data()
	for i, r := range idx {
		if r < 0 || r >= int64(V) {
			panicf("IndexRows: index %d at position %d out of range for table shape %v", r, i, w.shape)
		}
		copy(od[i*D:(i+1)*D], wd[int(r)*D:])
	}
	return out
}

// IndexAddRows adds row i of src ([len(idx), D]) into row idx[i] of dst
// ([V, D], contiguous), for every i: the adjoint of IndexRows. Repeated
// indices accumulate.
func IndexAddRows(dst *Tensor, idx []int64, src *Tensor) {
	if len(dst.shape) != 2 || len(src.shape) != 2 || src.shape[0] != len(idx) || src.shape[1] != dst.shape[1] {
		panicf("IndexAddRows: destination shape %v, source shape %v, %d indices", dst.shape, src.shape, len(idx))
	}
	V, D := dst.shape[0], dst.shape[1]
	if dst.buf != nil || src.buf != nil {
		checkRows("IndexAddRows", idx, V, dst.shape)
		_, be := deviceOf("IndexAddRows", dst, src)
		be.IndexAddRows(dst, idx, src)
		return
	}
	dd := dst.Data()
	sd := src.Contiguous().Data()
	for i, r := range idx {
		if r < 0 || r >= int64(V) {
			panicf("IndexAddRows: index %d at position %d out of range for table shape %v", r, i, dst.shape)
		}
		row := dd[int(r)*D:][:D]
		for j, v := range sd[i*D : (i+1)*D] {
			row[j] += v
		}
	}
}

// checkRows panics at the first index outside [0, V), as the host loops do.
func checkRows(op string, idx []int64, V int, shape []int) {
	for i, r := range idx {
		if r < 0 || r >= int64(V) {
			panicf("%s: index %d at position %d out of range for table shape %v", op, r, i, shape)
		}
	}
}
