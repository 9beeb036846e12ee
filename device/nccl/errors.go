package nccl

import "fmt"

// Result is ncclResult_t.
type Result int32

const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
)

var resultNames = map[Result]string{
	Success: "ncclSuccess", UnhandledCudaError: "ncclUnhandledCudaError", SystemError: "ncclSystemError",
	InternalError: "ncclInternalError", InvalidArgument: "ncclInvalidArgument", InvalidUsage: "ncclInvalidUsage",
	RemoteError: "ncclRemoteError", InProgress: "ncclInProgress",
}

func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// Error is a failed NCCL call: the call, its result, NCCL's message for
// the result and its last-error text (what went wrong, when NCCL says).
type Error struct {
	Call string
	Code Result
	Msg  string
	Last string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %s", e.Call, e.Code)
	if e.Msg != "" {
		s += " (" + e.Msg + ")"
	}
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}
