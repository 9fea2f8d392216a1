package events

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Validator holds a published message against the envelope's schema and its type's data schema,
// and a seller's webhook body against the schema of what sellers receive.
type Validator struct {
	envelope *jsonschema.Schema
	data     map[string]*jsonschema.Schema
	webhook  map[string]*jsonschema.Schema
}

// NewValidator compiles the embedded schemas; formats (date-time) are asserted.
func NewValidator() (*Validator, error) {
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	v := &Validator{data: map[string]*jsonschema.Schema{}, webhook: map[string]*jsonschema.Schema{}}
	compile := func(name string) (*jsonschema.Schema, error) {
		raw, err := Schema(name)
		if err != nil {
			return nil, err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("schema %s: %w", name, err)
		}
		url := "urn:checkout:schema-file:" + name
		if err := c.AddResource(url, doc); err != nil {
			return nil, err
		}
		return c.Compile(url)
	}
	var err error
	if v.envelope, err = compile("envelope"); err != nil {
		return nil, err
	}
	for _, t := range Types {
		if v.data[t], err = compile(t); err != nil {
			return nil, err
		}
		if _, err := Schema("webhook." + t); err == nil {
			if v.webhook[t], err = compile("webhook." + t); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

// ValidateWebhook checks a body a seller's endpoint received: the envelope, and data as its
// dataschema (urn:checkout:webhooks:<type>:v1) says.
func (v *Validator) ValidateWebhook(body []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	if err := v.envelope.Validate(inst); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return err
	}
	s, ok := v.webhook[e.Type]
	if !ok {
		return fmt.Errorf("type %q: no webhook schema", e.Type)
	}
	if want := "urn:checkout:webhooks:" + e.Type + ":v1"; e.DataSchema != want {
		return fmt.Errorf("dataschema %q: want %q", e.DataSchema, want)
	}
	data, err := jsonschema.UnmarshalJSON(bytes.NewReader(e.Data))
	if err != nil {
		return err
	}
	if err := s.Validate(data); err != nil {
		return fmt.Errorf("%s webhook data: %w", e.Type, err)
	}
	return nil
}

// Validate checks one message body: a CloudEvents envelope whose data follows its type's schema
// and whose dataschema names that schema.
func (v *Validator) Validate(body []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	if err := v.envelope.Validate(inst); err != nil {
		return fmt.Errorf("envelope: %w", err)
	}
	var e Envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return err
	}
	s, ok := v.data[e.Type]
	if !ok {
		return fmt.Errorf("type %q: %w", e.Type, ErrUnknownType)
	}
	if e.DataSchema != DataSchema(e.Type) {
		return fmt.Errorf("dataschema %q: want %q", e.DataSchema, DataSchema(e.Type))
	}
	data, err := jsonschema.UnmarshalJSON(bytes.NewReader(e.Data))
	if err != nil {
		return err
	}
	if err := s.Validate(data); err != nil {
		return fmt.Errorf("%s data: %w", e.Type, err)
	}
	return nil
}
