package problem

// The details several areas answer with. A details type's fields are declared in the order of
// their JSON names, so that it marshals as the map of earlier releases did (their keys sorted):
// recorded histories and answers hold that JSON.

// FieldError names one invalid field of a request.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Fields are the details of VALIDATION_FAILED: every invalid field.
type Fields struct {
	Fields []FieldError `json:"fields"`
}

// Invalid is VALIDATION_FAILED naming these fields.
func Invalid(fields ...FieldError) *Error {
	return New(ValidationFailed, "some fields are invalid").WithDetails(Fields{Fields: fields})
}

// StatusDetails name the status that refuses a request (an order's, a line's).
type StatusDetails struct {
	Status string `json:"status"`
}

// OrderDetails name the order an answer is about.
type OrderDetails struct {
	OrderID int64 `json:"orderId"`
}

// LimitDetails are the limit a request is past.
type LimitDetails struct {
	Limit int `json:"limit"`
}

// SKUsDetails name the SKUs that refuse a cart.
type SKUsDetails struct {
	SKUIDs []int64 `json:"skuIds"`
}
