package main

import (
	"os"
	"testing"

	clientfeatures "k8s.io/client-go/features"
)

func TestListGates(t *testing.T) {
	def := clientfeatures.FeatureGates()
	t.Setenv(watchListEnv, "") // set: the environment decides
	if got, want := (listGates{def}).Enabled(clientfeatures.WatchListClient), def.Enabled(clientfeatures.WatchListClient); got != want {
		t.Errorf("WatchListClient with %s set: %v, want the default gates' %v", watchListEnv, got, want)
	}
	if got, want := (listGates{def}).Enabled(clientfeatures.InformerResourceVersion), def.Enabled(clientfeatures.InformerResourceVersion); got != want {
		t.Errorf("another feature: %v, want %v", got, want)
	}
}

func TestListGatesOffByDefault(t *testing.T) {
	t.Setenv(watchListEnv, "x")
	// t.Setenv restores the variable after the test; unset it for this one.
	unsetenv(t, watchListEnv)
	if (listGates{clientfeatures.FeatureGates()}).Enabled(clientfeatures.WatchListClient) {
		t.Error("WatchListClient on without the environment variable")
	}
}

func unsetenv(t *testing.T, k string) {
	t.Helper()
	if err := os.Unsetenv(k); err != nil {
		t.Fatal(err)
	}
}
