package stockstore

// ReservationsOfOrderSQL is ReservationsOfOrder's statement, for the inventory to queue in a batch
// of other reads (inventory.QueueReservationOf); its rows are ReservationsOfOrderRow.
const ReservationsOfOrderSQL = reservationsOfOrder
