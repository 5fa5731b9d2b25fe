package store

import "context"

// Owner is whose a job is: what the access rules look at (package auth:
// its user, and the queue it ran in), as Job says them.
type Owner struct {
	User, Queue string
}

// OwnerReader is a store that says whose a job is, and which job an
// attempt is in, each by one read of a key that costs about the same
// whether or not the job or the attempt exists. The API asks it before it
// reads anything else of a job, so that a job the reader may not see is
// answered as an unknown one, and in about the same time
// (docs/security.md). Without it the API reads the job's summary (or the
// attempt's), which takes longer for a job that exists.
type OwnerReader interface {
	// JobOwner is the owner of a job (ErrNotFound if unknown).
	JobOwner(ctx context.Context, jobID string) (Owner, error)
	// AttemptJob is the job an attempt is in, as Attempt says it
	// (ErrNotFound if unknown).
	AttemptJob(ctx context.Context, attemptID string) (string, error)
}

// ReadJobOwner is the owner of a job (ErrNotFound if unknown): by
// JobOwner where st has it (OwnerReader), else from ReadJobSummary.
func ReadJobOwner(ctx context.Context, st Store, id string) (Owner, error) {
	if or, ok := st.(OwnerReader); ok {
		return or.JobOwner(ctx, id)
	}
	j, err := ReadJobSummary(ctx, st, id)
	if err != nil {
		return Owner{}, err
	}
	return Owner{j.User, j.Queue}, nil
}

// ReadAttemptJob is the job an attempt is in (ErrNotFound if unknown): by
// AttemptJob where st has it (OwnerReader), else from ReadAttemptLife.
func ReadAttemptJob(ctx context.Context, st Store, id string) (string, error) {
	if or, ok := st.(OwnerReader); ok {
		return or.AttemptJob(ctx, id)
	}
	l, err := ReadAttemptLife(ctx, st, id)
	if err != nil {
		return "", err
	}
	return l.JobID, nil
}
