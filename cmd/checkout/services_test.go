package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDevHTTPAddr_LoopbackUnlessSet(t *testing.T) {
	unset := func(string) string { return "" }
	assert.Equal(t, "127.0.0.1:8080", devHTTPAddr(":8080", unset), "dev listens on this machine only")
	set := func(k string) string { return map[string]string{"HTTP_ADDR": "0.0.0.0:9000"}[k] }
	assert.Equal(t, "0.0.0.0:9000", devHTTPAddr("0.0.0.0:9000", set), "unless told otherwise")
}
