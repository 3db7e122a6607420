// Package sock defines the record that the tables, the bind rules and the
// lookup share: one Entry per bound socket state, with the intrusive chain
// nodes that link it into its primary and secondary slots.
//
// An Entry is immutable once it is published. A change to a socket's
// addressing (connect) publishes a new Entry and retires the old one, so a
// reader that holds a pointer to an Entry always sees one consistent state.
// Only the chain links change after publication, and only under the slot
// lock of the chain they belong to.
package sock
