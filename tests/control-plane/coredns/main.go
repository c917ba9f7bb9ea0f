// Command coredns is CoreDNS with only the plugins a test cluster's DNS needs:
// the kubernetes plugin answers cluster.local from the API server, and nothing
// is forwarded (the tests resolve only cluster names; an upstream would make
// them depend on the host's resolver). Built from the CoreDNS module pinned in
// go.mod, the version kubeadm deploys with the control plane's Kubernetes.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, each registering itself with the server.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// The plugins a Corefile may name, in the order a query passes through them
// (the order of CoreDNS's plugin.cfg, restricted to those linked above).
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"cache",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
