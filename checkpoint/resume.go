package checkpoint

import (
	"errors"
	"fmt"
	"reflect"
)

// Resume opens the newest complete checkpoint in dir for a program
// starting with the description job of its run (its flags that must not
// change across a restart; saved with each checkpoint as Meta "job"). It
// returns nil and no error when dir is "" or holds no checkpoint yet, and
// an error saying the checkpoint is of another run when the job saved
// differs from job. skipped lists the newer step directories passed over,
// with the reason (see Find). The caller closes the checkpoint.
//
// Every rank of a job calls it before the collective that starts
// training, so that no rank can have saved a newer checkpoint in between
// and all resume from the same.
func Resume(dir string, job any) (ck *Checkpoint, skipped []Skipped, err error) {
	if dir == "" {
		return nil, nil, nil
	}
	path, _, skipped, err := Find(dir)
	if errors.Is(err, ErrNoCheckpoint) {
		return nil, skipped, nil
	}
	if err != nil {
		return nil, skipped, err
	}
	if ck, err = Open(path); err != nil {
		return nil, skipped, err
	}
	saved := reflect.New(reflect.TypeOf(job))
	if err := ck.Meta("job", saved.Interface()); err != nil {
		ck.Close()
		return nil, skipped, err
	}
	if !reflect.DeepEqual(saved.Elem().Interface(), job) {
		ck.Close()
		return nil, skipped, fmt.Errorf("checkpoint: %s is of another run (saved by %+v, this run is %+v): use another checkpoint directory", path, saved.Elem().Interface(), job)
	}
	return ck, skipped, nil
}
