//go:build !linux

package bench

import "errors"

func dropFromPageCache(string) error {
	return errors.New("dropping a file from the page cache needs Linux")
}
