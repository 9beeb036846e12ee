package cuda

// ArgsErr exposes the error an Args carries.
func ArgsErr(a *Args) error { return a.err }
