package staff_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/marketplace/checkout/internal/staff"
)

func TestActor_Check_OnlyANamedStaffMember(t *testing.T) {
	ok := staff.Actor{Sub: "900", Role: "support", Name: "Deniz Destek", Via: staff.ViaTemporalUI, IP: "10.0.0.5"}
	assert.NoError(t, ok.Check())
	ops := staff.Actor{Sub: "950", Role: "ops", Via: staff.ViaOpsAPI}
	assert.NoError(t, ops.Check(), "name and ip may be unknown")
	for name, a := range map[string]*staff.Actor{
		"none":          nil,
		"no subject":    {Role: "support", Via: staff.ViaTemporalUI},
		"a shopper":     {Sub: "7", Role: "shopper", Via: staff.ViaTemporalUI},
		"a seller":      {Sub: "1042", Role: "seller", Via: staff.ViaOpsAPI},
		"through what?": {Sub: "900", Role: "support"},
		"a long name":   {Sub: "900", Role: "support", Via: staff.ViaTemporalUI, Name: strings.Repeat("x", 201)},
	} {
		assert.Error(t, a.Check(), name)
	}
	var none *staff.Actor
	assert.ErrorIs(t, none.Check(), staff.ErrNoActor)
}

func TestActor_String_NamesThePersonAndWhere(t *testing.T) {
	assert.Equal(t, "Deniz Destek (support 900), temporal-ui from 10.0.0.5",
		staff.Actor{Sub: "900", Role: "support", Name: "Deniz Destek", Via: staff.ViaTemporalUI, IP: "10.0.0.5"}.String())
	assert.Equal(t, "ops 950, ops-api", staff.Actor{Sub: "950", Role: "ops", Via: staff.ViaOpsAPI}.String())
}
