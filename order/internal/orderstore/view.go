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

// The statement that finds a shopper's order by its request, for the saga's price check to send
// with its read of the cart (order.Store.QueueMade); its row is OrderByKeyRow.
const OrderByKeySQL = orderByKey

// The statements an authorization reads, for the order area to send together
// (order.PaymentToAuthorize); PaymentMethodToken's row is its token alone.
const (
	PaymentRefSQL         = paymentRef
	PaymentMethodTokenSQL = paymentMethodToken
)
