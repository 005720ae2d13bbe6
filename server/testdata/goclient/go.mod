// A module apart from lineage's: a program a third party would write over a
// client oapi-codegen generated from GET /v1/openapi.json (TestOpenAPIGoClient
// copies it to a scratch directory, generates lineageapi/ and builds it).
module example.com/lineageclient

go 1.26.0

require github.com/oapi-codegen/runtime v1.9.0

require (
	github.com/apapsch/go-jsonmerge/v2 v2.0.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
)
