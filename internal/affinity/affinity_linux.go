package affinity

import "golang.org/x/sys/unix"

// Allowed lists, in order, the CPUs the calling thread may run on (its
// process's, unless the thread was narrowed); nil if the kernel does not
// say.
func Allowed() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := range len(set) * 64 {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
