package main

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace/noop"
	cri "k8s.io/cri-client/pkg"
)

// criClean stops and removes every pod sandbox of the container runtime at
// endpoint (a unix:// address), as the kubelet would for pods it no longer
// runs: the runtime stops the containers, calls CNI DEL (so the pod's veth,
// address and NAT rules go), and removes the network namespace. `down`
// calls it after the kubelet has stopped and before the runtime does.
func criClean(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one argument, the runtime's endpoint")
	}
	runtime, err := cri.NewRemoteRuntimeService(args[0], 30*time.Second, noop.NewTracerProvider(), nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sandboxes, err := runtime.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	var failed error
	for _, s := range sandboxes {
		name := s.Metadata.Namespace + "/" + s.Metadata.Name
		if err := runtime.StopPodSandbox(ctx, s.Id); err != nil {
			failed = fmt.Errorf("stop pod sandbox of %s: %w", name, err)
			continue
		}
		if err := runtime.RemovePodSandbox(ctx, s.Id); err != nil {
			failed = fmt.Errorf("remove pod sandbox of %s: %w", name, err)
			continue
		}
		fmt.Printf("removed pod sandbox of %s\n", name)
	}
	return failed
}
