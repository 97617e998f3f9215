// Command kubectl is upstream's kubectl (cmd/kubectl/kubectl.go of kubernetes/kubernetes) built from its
// modules at the version go.mod pins, so the e2e tier runs one known kubectl rather than whatever is on
// PATH. kubectl-build.sh builds it once per machine into the control-plane cache.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"

	// client auth plugins, as upstream's kubectl links them
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err) // prints the error as kubectl does and exits non-zero
	}
}
