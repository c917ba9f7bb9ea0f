// The README's leader example: lead while the sidecar says so, stop the moment it does not.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"baton.dev/baton"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// --- README ---
	err := baton.New("").RunLeaderElection(ctx, baton.LeaderElectionConfig{Callbacks: baton.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context, term baton.Term) {
			fmt.Println("leading with fencing token", term.Token) // do the leader's work until ctx ends
			<-ctx.Done()
		},
	}})
	// --- README ---
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
