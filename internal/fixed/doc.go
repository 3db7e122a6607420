// Package fixed is udpdemux's fixed-slot storage, Linux's design
// (demux.Config.Slots from 256 to 65536): the primary table of package
// hash1, keyed by port, and the secondary table of package hash2, keyed by
// (address, port), both of a size fixed for the table's life. Its lookups
// apply the configured strategy to those tables: one-phase scans the
// port's primary chain; two-phase searches the secondary slot of
// (destination address, port), then that of (wildcard, port), skipping
// the second when an exact-address socket was found or both are one slot;
// hybrid, Linux 2.6.33's rule, is two-phase when the primary chain is
// longer than a threshold and not shorter than the secondary slot, else
// one-phase. When entries moving between secondary slots spoil a
// two-phase search try after try, it gives way to a scan of the primary
// chain, where a move replaces an entry in place. Its writes are linking
// and unlinking entries in both chains, SO_REUSEPORT groups, the move of
// an entry between secondary slots inside their sequence counts,
// explicit-port conflict checks (bind.Checker) and the choice of an
// ephemeral port (bind.Ephemeral's algorithms). Its Engine has the
// methods of grow.Engine, the default storage's, so that package demux
// reads and writes both alike.
//
// # Locks
//
// A write locks its port's primary slot first (LockPort, or Ephemeral for
// bind(0)), which serialises every change to the sockets of the ports that
// share the slot; the secondary slots it changes are locked inside it, in
// ascending index, through the same lockorder.Guard, and Unlock releases
// them all together. The Guard lives in a Held, the write's handle;
// bind(0)'s draws take the random source's lock through it too, holding
// no slot lock.
package fixed
