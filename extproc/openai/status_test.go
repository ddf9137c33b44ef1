package openai

import (
	"net/http"
	"testing"
)

func TestStatusesAreNetHTTPs(t *testing.T) {
	for got, want := range map[int]int{
		StatusBadRequest:            http.StatusBadRequest,
		StatusNotFound:              http.StatusNotFound,
		StatusRequestEntityTooLarge: http.StatusRequestEntityTooLarge,
		StatusServiceUnavailable:    http.StatusServiceUnavailable,
	} {
		if got != want {
			t.Errorf("status %d, net/http says %d", got, want)
		}
	}
}
