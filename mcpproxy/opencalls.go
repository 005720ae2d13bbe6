package mcpproxy

// OpenCalls is the proxy's durable record of the calls whose request is
// pending, or approved and not yet used (decision D112 (at most once)), for the other front
// ends of the guard that continue a call's request the way the proxy does
// (the coding-agent hook, `lineagec hook claude-code`): one JSON file per
// agent in dir, replaced atomically under a lock.
type OpenCalls struct{ o *openCalls }

// OpenCallsAt opens (creating dir) the open calls of agent in dir.
func OpenCallsAt(dir, agent string) (*OpenCalls, error) {
	o, err := newOpenCalls(dir, agent)
	if err != nil {
		return nil, err
	}
	return &OpenCalls{o}, nil
}

// Lookup is the open request id of a call key, or "".
func (c *OpenCalls) Lookup(key string) (string, error) { return c.o.lookup(key) }

// Open records id as the open request of key.
func (c *OpenCalls) Open(key, id string) error { return c.o.open(key, id) }

// Drop forgets key's request if it is still id (a denied or rejected one).
func (c *OpenCalls) Drop(key, id string) error { return c.o.drop(key, id) }

// Claim takes an allowed request out of the record, and reports whether this
// caller took it (and so may let the call run): an approved request is used
// at most once. A request that was not recorded (allowed at once) is taken.
func (c *OpenCalls) Claim(key, id string, recorded bool) (bool, error) {
	return c.o.claim(key, id, recorded)
}
