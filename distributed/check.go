package distributed

import "fmt"

// The argument checks every backend makes of a collective call, with the
// errors this package's API promises ("distributed: allreduce: unknown
// reduce op 9"); op names the call.

// CheckDTypes fails a call whose buffers are of an unknown dtype or of
// different dtypes (the first buffer is the output).
func CheckDTypes(op string, bufs ...Buffer) error {
	for _, b := range bufs {
		if b.DType.Size() == 0 {
			return fmt.Errorf("distributed: %s: unknown dtype %d", op, uint8(b.DType))
		}
		if b.DType != bufs[0].DType {
			return fmt.Errorf("distributed: %s: output is %v but input is %v", op, bufs[0].DType, b.DType)
		}
	}
	return nil
}

// CheckReduceOp fails a call with an unknown reduce op.
func CheckReduceOp(op string, r ReduceOp) error {
	if r > Prod {
		return fmt.Errorf("distributed: %s: unknown reduce op %d", op, uint8(r))
	}
	return nil
}

// CheckRoot fails a call whose root is not a rank of a group of size
// ranks.
func CheckRoot(op string, root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("distributed: %s: root %d out of range [0, %d)", op, root, size)
	}
	return nil
}

// CheckParts fails a call whose whole buffer does not hold one part for
// each of size ranks; wholeName and partName name the two buffers in the
// error ("output", "root's input").
func CheckParts(op string, size int, whole Buffer, wholeName string, part Buffer, partName string) error {
	if whole.Len() != size*part.Len() {
		return fmt.Errorf("distributed: %s: %s has %d elements, want %d = %d ranks × %d %s elements",
			op, wholeName, whole.Len(), size*part.Len(), size, part.Len(), partName)
	}
	return nil
}

// CheckSplit fails an all-to-all whose input and output differ in length
// or do not split into size equal chunks.
func CheckSplit(op string, out, in Buffer, size int) error {
	switch {
	case in.Len() != out.Len():
		return fmt.Errorf("distributed: %s: input has %d elements but output %d", op, in.Len(), out.Len())
	case in.Len()%size != 0:
		return fmt.Errorf("distributed: %s: %d elements do not split into %d equal chunks", op, in.Len(), size)
	}
	return nil
}

// CheckRooted checks the buffers of a gather (gather true: the root's
// output holds every rank's input, one after the other) or a scatter (the
// root's input holds every rank's output) on rank of a group of size
// ranks: on the root both buffers, elsewhere only the part every rank has.
// check is the backend's check of its buffers (CheckDTypes, or one that
// also bounds their lengths). It returns the root's whole buffer (the
// gather's out, the scatter's in; the zero Buffer on other ranks).
func CheckRooted(op string, root, rank, size int, out, in Buffer, gather bool, check func(op string, bufs ...Buffer) error) (Buffer, error) {
	whole, part, wholeName, partName := in, out, "root's input", "output"
	if gather {
		whole, part, wholeName, partName = out, in, "root's output", "input"
	}
	if err := CheckRoot(op, root, size); err != nil {
		return Buffer{}, err
	}
	if rank != root {
		return Buffer{}, check(op, part)
	}
	err := check(op, out, in)
	if err == nil {
		err = CheckParts(op, size, whole, wholeName, part, partName)
	}
	return whole, err
}
