package pricingstore

// The statement that prices SKUs, for the pricing area to queue on a batch beside other reads
// (pricing.QueueCompute); its rows are PricedSKUsRow.
const PricedSKUsSQL = pricedSKUs
