// Command node is one binary holding the Kubernetes processes of a test node
// that the control plane (../main.go) does not: the kubelet, kube-proxy and
// kube-scheduler (the control plane runs without a scheduler unless a node
// joins). It is built from the same pinned k8s.io/kubernetes module as the
// control plane, in the same Go module, so both speak the same version.
//
// Usage: node kubelet|kube-proxy|kube-scheduler [FLAGS...]
// (or call it through a link whose name is one of those), or
// node cri-clean ENDPOINT (see cri.go).
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = "usage: node kubelet|kube-proxy|kube-scheduler [FLAGS...] | cri-clean ENDPOINT"

func main() {
	// The name we were called by wins, so links named after a component work
	// like the upstream binaries; otherwise the first argument names it.
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch name {
	case "kubelet", "kube-proxy", "kube-scheduler":
	default:
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}

	switch name {
	case "kubelet":
		cmd := kubelet.NewKubeletCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-proxy":
		cmd := proxy.NewProxyCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-scheduler":
		cmd := scheduler.NewSchedulerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "cri-clean":
		if err := criClean(args); err != nil {
			fmt.Fprintf(os.Stderr, "node cri-clean: %v\n", err)
			os.Exit(1)
		}
	case "-h", "--help", "help":
		fmt.Println(usage)
	default:
		fmt.Fprintf(os.Stderr, "node: unknown component %q\n%s\n", name, usage)
		os.Exit(2)
	}
}
