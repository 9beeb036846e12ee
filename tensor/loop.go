package tensor

// loop walks up to three operands laid over one shape, one innermost row at
// a time, so kernels run tight strided loops instead of calling a function
// per element. Adjacent dimensions that are laid out contiguously for every
// operand are merged first, so contiguous operands become one long row.
type loop struct {
	shape []int
	st    [3][]int
}

// newLoop prepares a walk over shape; strides holds one stride slice (of
// len(shape)) per operand, at most three.
func newLoop(shape []int, strides ...[]int) loop {
	var l loop
	nops := len(strides)
	// Drop size-1 dimensions; they never advance an index.
	for i, s := range shape {
		if s == 1 {
			continue
		}
		l.shape = append(l.shape, s)
		for k := 0; k < nops; k++ {
			l.st[k] = append(l.st[k], strides[k][i])
		}
	}
	// Merge dimension i into i+1 when every operand steps over i exactly
	// as if i and i+1 were one dimension.
	for i := len(l.shape) - 2; i >= 0; i-- {
		ok := true
		for k := 0; k < nops; k++ {
			if l.st[k][i] != l.st[k][i+1]*l.shape[i+1] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		l.shape[i+1] *= l.shape[i]
		l.shape = append(l.shape[:i], l.shape[i+1:]...)
		for k := 0; k < nops; k++ {
			l.st[k] = append(l.st[k][:i], l.st[k][i+1:]...)
		}
	}
	if len(l.shape) == 0 {
		l.shape = []int{1}
		for k := 0; k < nops; k++ {
			l.st[k] = []int{0}
		}
	}
	for k := nops; k < 3; k++ {
		l.st[k] = make([]int, len(l.shape))
	}
	return l
}

// rows calls fn once per innermost row with the operands' storage offsets,
// the row length and the operands' inner strides. It does nothing when the
// shape holds no elements.
func (l *loop) rows(o0, o1, o2 int, fn func(o0, o1, o2, n, s0, s1, s2 int)) {
	nd := len(l.shape)
	for _, s := range l.shape {
		if s == 0 {
			return
		}
	}
	in := nd - 1
	n := l.shape[in]
	s0, s1, s2 := l.st[0][in], l.st[1][in], l.st[2][in]
	if nd == 1 {
		fn(o0, o1, o2, n, s0, s1, s2)
		return
	}
	var idxBuf [8]int
	idx := idxBuf[:0]
	if nd-1 > len(idxBuf) {
		idx = make([]int, nd-1)
	} else {
		idx = idxBuf[:nd-1]
	}
	for {
		fn(o0, o1, o2, n, s0, s1, s2)
		d := nd - 2
		for ; d >= 0; d-- {
			idx[d]++
			o0 += l.st[0][d]
			o1 += l.st[1][d]
			o2 += l.st[2][d]
			if idx[d] < l.shape[d] {
				break
			}
			o0 -= l.st[0][d] * l.shape[d]
			o1 -= l.st[1][d] * l.shape[d]
			o2 -= l.st[2][d] * l.shape[d]
			idx[d] = 0
		}
		if d < 0 {
			return
		}
	}
}
