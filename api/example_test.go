package api_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lineage-guard/lineage"
	"github.com/lineage-guard/lineage/api"
)

// An error answer of the service, as a client reads it: errors.Is matches it
// against lineage's sentinels by its code.
func Example() {
	var e api.Error
	_ = json.Unmarshal([]byte(`{"code":"id_conflict","message":"request id \"w1\" was used before with another tool"}`), &e)
	e.Status = 409
	var err error = &e
	fmt.Println(errors.Is(err, lineage.ErrIDConflict), api.Status(e.Code))
	// Output: true 409
}
