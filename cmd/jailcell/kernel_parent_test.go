package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestWatchParentKeepsLiveParents: the kernel is not ended while its
// parent lives: JPY_PARENT_PID naming the parent, naming another process
// (a launcher in between: only a reparent to init ends it), or unusable.
// That a dead client ends it is test/jupyter's TestKernelEndsWithItsClient.
func TestWatchParentKeepsLiveParents(t *testing.T) {
	for _, client := range []int{os.Getppid(), os.Getpid(), 0, 1, -5} {
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan struct{})
		go func() { watchParent(ctx, cancel, client, 5*time.Millisecond); close(done) }()
		time.Sleep(60 * time.Millisecond)
		if err := context.Cause(ctx); err != nil {
			t.Errorf("JPY_PARENT_PID %d, parent %d alive: kernel ended: %v", client, os.Getppid(), err)
		}
		cancel(nil)
		<-done
	}
}
