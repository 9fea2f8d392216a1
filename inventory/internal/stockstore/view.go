package stockstore

// ReservationsOfOrderSQL is ReservationsOfOrder's statement, for the inventory to queue in a batch
// of other reads (inventory.QueueReservationOf); its rows are ReservationsOfOrderRow.
const ReservationsOfOrderSQL = reservationsOfOrder

// ReserveOrderSQL is ReserveOrder's statement, for the benchmark that measures it beside the
// parts of a reservation (BenchmarkReserveParts).
const ReserveOrderSQL = reserveOrder
