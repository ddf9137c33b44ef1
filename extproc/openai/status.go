package openai

// The HTTP statuses the request-path core answers with (Error.Status).
// They are spelled here, with net/http's values, rather than imported from
// net/http, so that parsing, templating, tokenizing and hashing link no
// network package (issue 18's import rules, internal/importrules).
const (
	StatusBadRequest            = 400 // http.StatusBadRequest
	StatusNotFound              = 404 // http.StatusNotFound
	StatusRequestEntityTooLarge = 413 // http.StatusRequestEntityTooLarge
	StatusServiceUnavailable    = 503 // http.StatusServiceUnavailable
)
