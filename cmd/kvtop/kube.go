package main

import (
	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"github.com/kvtop/kvtop/config"
)

// kubeFlags are the discovery flags of the console, snapshot and serve
// alike, each bound to its key of the config's kubernetes section.
var kubeFlags = []struct{ flag, key string }{
	{"kube", "kubernetes.enabled"},
	{"kubeconfig", "kubernetes.kubeconfig"},
	{"context", "kubernetes.context"},
	{"namespace", "kubernetes.namespace"},
	{"selector", "kubernetes.selector"},
	{"inference-pool", "kubernetes.inference_pool"},
	{"kube-access", "kubernetes.access"},
}

func addKubeFlags(c *cobra.Command) {
	f := c.Flags()
	f.Bool("kube", false, "find the workers in Kubernetes: pods of the current context ($KUBECONFIG, else ~/.kube/config)")
	f.String("kubeconfig", "", "kubeconfig `FILE` (default $KUBECONFIG, then ~/.kube/config)")
	f.String("context", "", "kubeconfig context (default the current one); implies --kube")
	f.StringP("namespace", "n", "", "namespace of the worker pods (default the context's)")
	f.StringP("selector", "l", "", "label selector of the worker pods, e.g. app=vllm; implies --kube")
	f.String("inference-pool", "", "an InferencePool `NAME`: its pods are the workers, its endpoint picker a router; implies --kube")
	f.String("kube-access", "", "how to reach the pods: direct (pod IPs), proxy (through the API server, from a bastion) or auto (default)")
}

// bindKubeFlags binds the discovery flags the operator set to their
// config keys (flags win over the file and KVTOP_*); --context turns
// discovery on like --kube.
func bindKubeFlags(cmd *cobra.Command, v *viper.Viper, flags config.Flags) {
	for _, kf := range kubeFlags {
		if f := cmd.Flags().Lookup(kf.flag); f != nil && f.Changed {
			_ = v.BindPFlag(kf.key, f)
			flags[kf.key] = "--" + f.Name
		}
	}
	if f := cmd.Flags().Lookup("context"); f != nil && f.Changed {
		v.Set("kubernetes.enabled", true)
	}
}
