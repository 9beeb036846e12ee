package plan

import "strings"

// LoadDevice reads a device file, or a name kept in the repository when
// the argument names no file and has no path separator or extension.
func LoadDevice(arg string, readFile func(string) ([]byte, error)) (*Device, error) {
	if isName(arg) {
		return BuiltinDevice(arg)
	}
	data, err := readFile(arg)
	if err != nil {
		return nil, err
	}
	return ParseDevice(data)
}

// LoadFabric reads a fabric file, or a name kept in the repository, as
// LoadDevice does.
func LoadFabric(arg string, readFile func(string) ([]byte, error)) (*Fabric, error) {
	if isName(arg) {
		return BuiltinFabric(arg)
	}
	data, err := readFile(arg)
	if err != nil {
		return nil, err
	}
	return ParseFabric(data)
}

// isName reports whether s names a description kept in the repository
// rather than a file.
func isName(s string) bool { return !strings.ContainsAny(s, `/\.`) }
