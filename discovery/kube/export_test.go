package kube

// SlimPod is the informer transform, for the cache measurement.
var SlimPod = slimPod
