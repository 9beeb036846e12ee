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
