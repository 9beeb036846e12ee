package data

import "strconv"

func itoa(i int) string     { return strconv.Itoa(i) }
func utoa(u uint64) string  { return strconv.FormatUint(u, 10) }
func boolStr(b bool) string { return strconv.FormatBool(b) }
