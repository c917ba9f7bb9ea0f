// The README's lock example: hold lock db while this process lives, pass its token on.
package main

import (
	"context"
	"fmt"
	"os"

	"baton.dev/baton"
)

func main() {
	ctx := context.Background()
	// --- README ---
	lock, err := baton.New("").Lock(ctx, "db", baton.LockOptions{}) // held by a stream: dies with this process
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer lock.Unlock(ctx)
	fmt.Println("holding db with fencing token", lock.Token()) // lock.Context() ends if it is lost
	// --- README ---
}
