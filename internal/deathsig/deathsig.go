// Package deathsig starts child processes that are signalled when this
// process ends (a KDC or a ClickHouse server started by a test or the
// demo, which must not outlive it, even killed without its cleanups).
//
// Linux's parent-death signal (PR_SET_PDEATHSIG, SysProcAttr.Pdeathsig)
// is sent when the thread that forked the child ends, not the process
// (https://go.dev/issue/27505), and this program ends threads of its
// own: the agent's taskstats probe ends one to see its exit record, and
// hotspot's credential switches end theirs. A child forked from such a
// thread was killed at random moments (TestSecureCluster's KDC in CI,
// as root). Start forks from a goroutine locked to its thread until the
// child has exited, so that thread lives as long as the child.
package deathsig

import (
	"os/exec"
	"runtime"
	"syscall"
)

// Start starts cmd with sig as its parent-death signal, and waits for it
// in the background: done is closed once cmd.Wait has returned
// (cmd.ProcessState is then set). cmd.SysProcAttr's other fields are kept.
// The caller must not call cmd.Wait itself. An error is cmd.Start's.
func Start(cmd *exec.Cmd, sig syscall.Signal) (done <-chan struct{}, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = sig
	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			runtime.UnlockOSThread()
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		// The child is gone: its signal no longer depends on this thread.
		runtime.UnlockOSThread()
		close(exited)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}
