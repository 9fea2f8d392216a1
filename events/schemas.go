package events

import (
	"embed"
	"fmt"
)

//go:embed schemas/*.json
var schemaFiles embed.FS

// Schema is the JSON Schema (2020-12) of a type's data, or of the envelope ("envelope").
func Schema(typ string) ([]byte, error) {
	b, err := schemaFiles.ReadFile("schemas/" + typ + ".json")
	if err != nil {
		return nil, fmt.Errorf("no schema for %q: %w", typ, err)
	}
	return b, nil
}
