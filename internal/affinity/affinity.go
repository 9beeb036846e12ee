// Package affinity reads which CPUs a process may run on, for the
// launcher's binding of workers and for dist's judgement of whether the
// ranks of a host fit its CPUs.
package affinity
