package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDevAddr_LoopbackUnlessSet(t *testing.T) {
	unset := func(string) string { return "" }
	assert.Equal(t, "127.0.0.1:8080", devAddr("HTTP_ADDR", ":8080", ":8080", unset), "dev listens on this machine only")
	assert.Equal(t, "127.0.0.1:9091", devAddr("METRICS_ADDR", "127.0.0.1:9091", "127.0.0.1:9091", unset), "its metrics too")
	set := func(k string) string { return map[string]string{"HTTP_ADDR": "0.0.0.0:9000"}[k] }
	assert.Equal(t, "0.0.0.0:9000", devAddr("HTTP_ADDR", "0.0.0.0:9000", ":8080", set), "unless told otherwise")
	assert.Equal(t, "127.0.0.1:9091", devAddr("METRICS_ADDR", "127.0.0.1:9091", "127.0.0.1:9091", set), "each setting on its own")
}
