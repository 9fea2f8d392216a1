package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/order"
)

// MaxAddressesPerUser bounds a shopper's address book, in PostgreSQL (CreateAddress): it holds
// however many API replicas write to one book at once.
const MaxAddressesPerUser = 50

type addressRequest struct {
	City  string   `json:"city"`
	Line1 string   `json:"line1"`
	Lat   *float64 `json:"lat"`
	Lon   *float64 `json:"lon"`
}

type addressResponse struct {
	AddressID int64     `json:"addressId"`
	City      string    `json:"city"`
	Line1     string    `json:"line1"`
	Lat       float64   `json:"lat"`
	Lon       float64   `json:"lon"`
	CreatedAt time.Time `json:"createdAt"`
}

func (r *addressRequest) validate() error {
	var v validation
	r.City, r.Line1 = strings.TrimSpace(r.City), strings.TrimSpace(r.Line1)
	if r.City == "" || len(r.City) > 100 {
		v.add("city", "required, at most 100 characters")
	}
	if r.Line1 == "" || len(r.Line1) > 300 {
		v.add("line1", "required, at most 300 characters")
	}
	if r.Lat == nil || math.IsNaN(*r.Lat) || *r.Lat < -90 || *r.Lat > 90 {
		v.add("lat", "required, between -90 and 90")
	}
	if r.Lon == nil || math.IsNaN(*r.Lon) || *r.Lon < -180 || *r.Lon > 180 {
		v.add("lon", "required, between -180 and 180")
	}
	return v.err()
}

func (s *Server) createAddress(c echo.Context) error {
	var req addressRequest
	if err := bind(c, &req); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	p := mustPrincipal(c)
	// The count and the insert are one decision, under the user's lock (order.CreateAddress).
	row, err := order.CreateAddress(ctx, s.Pool, order.Address{UserID: p.UserID, City: req.City, Line1: req.Line1,
		Lat: *req.Lat, Lon: *req.Lon}, MaxAddressesPerUser)
	if errors.Is(err, order.ErrAddressBookFull) {
		return problem.New(problem.LimitReached, "address book is full").
			WithDetails(problem.LimitDetails{Limit: MaxAddressesPerUser})
	}
	if err != nil {
		return fmt.Errorf("adding an address: %w", err)
	}
	return c.JSON(http.StatusCreated, addressResponse{AddressID: row.ID, City: req.City, Line1: req.Line1,
		Lat: *req.Lat, Lon: *req.Lon, CreatedAt: row.CreatedAt})
}

func (s *Server) listAddresses(c echo.Context) error {
	rows, err := s.orders.ListAddresses(c.Request().Context(), mustPrincipal(c).UserID)
	if err != nil {
		return fmt.Errorf("listing addresses: %w", err)
	}
	out := make([]addressResponse, len(rows))
	for i, r := range rows {
		out[i] = addressResponse{AddressID: r.ID, City: r.City, Line1: r.Line1, Lat: r.Lat, Lon: r.Lon, CreatedAt: r.CreatedAt}
	}
	return c.JSON(http.StatusOK, map[string]any{"addresses": out})
}
