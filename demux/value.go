package demux

import (
	"reflect"
	"unsafe"

	"github.com/udpdemux/udpdemux/lookup"
)

// valueRep is where a table keeps its sockets' values in their lookup.Refs.
// A lookup reads the value from the Ref it found, which sits in memory it
// has just read (the winner's entry), so that small values and pointers
// cost no further load. Only values that fit neither word are boxed.
type valueRep uint8

const (
	inWord valueRep = iota // at most 8 bytes without pointers: Ref.Word
	inPtr                  // exactly one pointer (a pointer, map, chan or func): Ref.Ptr
	boxed                  // anything else: a copy that Ref.Ptr points to
)

// repOf returns where values of type V go.
func repOf[V any]() valueRep {
	t := reflect.TypeFor[V]()
	switch {
	case t.Size() <= 8 && !hasPointers(t):
		return inWord
	case t.Size() == unsafe.Sizeof(unsafe.Pointer(nil)) && hasPointers(t):
		// A pointer-sized type with a pointer in it is that pointer and
		// nothing else, which the garbage collector finds in Ptr.
		return inPtr
	}
	return boxed
}

// hasPointers reports whether a value of type t holds a pointer.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	}
	return true // pointers, maps, chans, funcs, interfaces, slices, strings
}

// newRef returns the Ref of socket s with value v.
func (t *Table[V]) newRef(s *lookup.Socket, v V) lookup.Ref {
	r := lookup.Ref{Sock: s}
	switch t.vrep {
	case inWord:
		*(*V)(unsafe.Pointer(&r.Word)) = v
	case inPtr:
		*(*V)(unsafe.Pointer(&r.Ptr)) = v
	default:
		p := new(V)
		*p = v
		r.Ptr = unsafe.Pointer(p)
	}
	return r
}

// value returns the value kept in r, a Ref that t made.
func (t *Table[V]) value(r *lookup.Ref) V {
	switch t.vrep {
	case inWord:
		return *(*V)(unsafe.Pointer(&r.Word))
	case inPtr:
		return *(*V)(unsafe.Pointer(&r.Ptr))
	}
	return *(*V)(r.Ptr)
}
