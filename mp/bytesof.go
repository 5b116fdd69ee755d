package mp

import (
	"reflect"
	"sync"
	"unsafe"
)

// BytesOf is the memory of s as bytes, without a copy: a buffer to send
// or receive a slice of plain structs (particles, cells) as it lies, the
// receiver passing BytesOf of its own slice of the same length. T must be
// plain data: numbers, booleans, and arrays and structs of them, at any
// depth. A T that holds a pointer, a string, a slice, a map, an interface,
// a channel or a function anywhere (whose bytes mean nothing in another
// process, and whose memory the garbage collector must see) is
// ErrInvalid; send such values with SendValue.
//
// The view shares s's memory: writing one writes the other, and it is as
// long as s (len(s)·size of T bytes; empty for an empty s). The bytes
// include the padding between fields as it lies in memory, and are in
// this machine's byte order, so both ends must have one layout of T (the
// same program, or the same definition, on machines of one architecture).
func BytesOf[T any](s []T) ([]byte, error) {
	t := reflect.TypeFor[T]()
	if why := plainCache(t); why != "" {
		return nil, invalidf("BytesOf: %v is not plain data: %s", t, why)
	}
	n := len(s) * int(t.Size())
	if n == 0 {
		return []byte{}, nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), n), nil
}

// plainTypes caches notPlain's answer by type ("" for a plain one).
var plainTypes sync.Map // reflect.Type → string

// plainCache is notPlain(t), remembered.
func plainCache(t reflect.Type) string {
	if why, ok := plainTypes.Load(t); ok {
		return why.(string)
	}
	why := notPlain(t, t.String())
	plainTypes.Store(t, why)
	return why
}

// notPlain says where t, reached by path, holds something other than
// plain data, or returns "" when it holds none.
func notPlain(t reflect.Type, path string) string {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return ""
	case reflect.Array:
		return notPlain(t.Elem(), path+"[…]")
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if why := notPlain(f.Type, path+"."+f.Name); why != "" {
				return why
			}
		}
		return ""
	}
	return path + " is a " + t.Kind().String()
}
