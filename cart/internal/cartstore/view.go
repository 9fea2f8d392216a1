package cartstore

// The statements that read a cart, for the cart area to queue on a batch beside other reads; their
// rows are those of their functions here (Cart for GetCart).
const (
	GetCartSQL = getCart
	CartDocSQL = cartDoc
)
