package server

import _ "embed"

// openAPI is the OpenAPI 3.1 document of the API, served at /v1/openapi.json;
// a test holds it to the routes.
//
//go:embed openapi.json
var openAPI []byte
