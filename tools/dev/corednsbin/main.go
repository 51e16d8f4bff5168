// Command coredns is CoreDNS (pinned in go.mod) with only the plugins the local cluster's DNS
// uses: the full plugin set pulls in every cloud SDK and takes several times longer to build.
// The directives keep CoreDNS's own plugin.cfg order, which is the order a query passes them.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives in the order of CoreDNS's plugin.cfg (a subset of it).
var directives = []string{"reload", "ready", "health", "errors", "cache", "kubernetes", "loop", "forward"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
