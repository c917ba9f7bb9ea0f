// Command control-plane is one binary holding the three processes of a test
// Kubernetes control plane: etcd, kube-apiserver and kube-controller-manager.
// One multi-call binary links the shared Kubernetes packages once, so a cold
// build compiles and links them once instead of three times.
//
// Usage: control-plane etcd|kube-apiserver|kube-controller-manager [FLAGS...]
// (or call it through a link whose name is one of those).
package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	_ "time/tzdata" // CronJob time zones, as in the upstream mains

	"go.etcd.io/etcd/server/v3/etcdmain"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

const usage = "usage: control-plane etcd|kube-apiserver|kube-controller-manager [FLAGS...] | free-ports N"

func main() {
	// The name we were called by wins, so links named after a component work
	// like the upstream binaries; otherwise the first argument names it.
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch name {
	case "etcd", "kube-apiserver", "kube-controller-manager":
	default:
		if len(args) == 0 {
			fmt.Fprintln(os.Stderr, usage)
			os.Exit(2)
		}
		name, args = args[0], args[1:]
	}

	switch name {
	case "etcd":
		// etcdmain.Main parses its argument vector itself, program name included.
		etcdmain.Main(append([]string{"etcd"}, args...))
	case "kube-apiserver":
		cmd := apiserver.NewAPIServerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "kube-controller-manager":
		cmd := controllermanager.NewControllerManagerCommand()
		cmd.SetArgs(args)
		os.Exit(cli.Run(cmd))
	case "free-ports":
		if err := freePorts(args); err != nil {
			fmt.Fprintf(os.Stderr, "control-plane free-ports: %v\n", err)
			os.Exit(1)
		}
	case "-h", "--help", "help":
		fmt.Println(usage)
	default:
		fmt.Fprintf(os.Stderr, "control-plane: unknown component %q\n%s\n", name, usage)
		os.Exit(2)
	}
}

// freePorts prints N distinct TCP ports that were free on 127.0.0.1, one a
// line. The kernel picks them (port 0); all N listeners stay open until every
// port is chosen so the N are distinct. Another process could still take one
// before the caller binds it, a race the caller reports as a failed start.
func freePorts(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one argument, the number of ports")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 || n > 64 {
		return fmt.Errorf("number of ports %q: want 1..64", args[0])
	}
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
	}
	for _, l := range listeners {
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}
