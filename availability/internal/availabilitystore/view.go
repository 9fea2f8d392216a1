package availabilitystore

// The statement that reads sellable stock, for the availability area to queue on a batch beside
// other reads (availability.QueueSellable); its rows are SellableBySKURow.
const SellableBySKUSQL = sellableBySKU
