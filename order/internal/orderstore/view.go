package orderstore

// The statements of an order as its shopper and support read it, for the order area to send
// together in one batch (order.Store.View); their rows are the types of their functions here.
const (
	GetOrderSQL                 = getOrder
	OrderItemsSQL               = orderItems
	LineCancellationsOfOrderSQL = lineCancellationsOfOrder
	GetPaymentSQL               = getPayment
	OrderEventsSQL              = orderEvents
	StaffActionsOfOrderSQL      = staffActionsOfOrder
)
