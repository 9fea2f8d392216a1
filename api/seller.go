package api

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/marketplace/checkout/internal/money"
	"github.com/marketplace/checkout/internal/problem"
	"github.com/marketplace/checkout/inventory"
)

// MaxSellerBatch bounds the rows of one seller API call.
const MaxSellerBatch = 1000

// MaxFutureSkew is how far in the future a seller's sourceUpdatedAt may lie; a later stamp would
// make every honest update after it look stale.
const MaxFutureSkew = 5 * time.Minute

type skuRow struct {
	SKU         string `json:"sku"`
	Title       string `json:"title"`
	Price       string `json:"price"`
	Currency    string `json:"currency"`
	MaxPerOrder *int32 `json:"maxPerOrder"`
}

type skuResult struct {
	SKU    string `json:"sku"`
	SKUID  int64  `json:"skuId"`
	Status string `json:"status"`
}

// maxCurrencyDigits is the most decimals an ISO 4217 currency has (KWD, BHD): the shape a price
// is checked against when its currency is not one, so that both mistakes are named at once.
const maxCurrencyDigits = 3

func checkBatch(n int) error {
	if n == 0 {
		return problem.New(problem.ValidationFailed, "the batch is empty").
			WithDetails(problem.Fields{Fields: []problem.FieldError{{Field: "body", Message: "at least one row"}}})
	}
	if n > MaxSellerBatch {
		return problem.New(problem.BatchTooLarge, fmt.Sprintf("at most %d rows per call", MaxSellerBatch)).
			WithDetails(problem.LimitDetails{Limit: MaxSellerBatch})
	}
	return nil
}

// putSKUs creates or updates the seller's catalog rows, all in one transaction after every row
// validated.
func (s *Server) putSKUs(c echo.Context) error {
	var rows []skuRow
	if err := bind(c, &rows); err != nil {
		return err
	}
	if err := checkBatch(len(rows)); err != nil {
		return err
	}
	var v validation
	prices := make([]int64, len(rows))
	for i, r := range rows {
		at := func(f string) string { return fmt.Sprintf("[%d].%s", i, f) }
		if r.SKU = strings.TrimSpace(r.SKU); r.SKU == "" || len(r.SKU) > 64 {
			v.add(at("sku"), "required, at most 64 characters")
		}
		if r.Title = strings.TrimSpace(r.Title); r.Title == "" || len(r.Title) > 200 {
			v.add(at("title"), "required, at most 200 characters")
		}
		if !money.ValidCurrency(r.Currency) {
			v.add(at("currency"), "an ISO 4217 currency code, such as TRY")
			if _, err := money.ParseDecimal(r.Price, maxCurrencyDigits); err != nil {
				v.add(at("price"), err.Error())
			}
		} else if p, err := money.Parse(r.Price, r.Currency); err != nil {
			v.add(at("price"), err.Error())
		} else {
			prices[i] = p
		}
		if r.MaxPerOrder == nil || *r.MaxPerOrder < 1 || *r.MaxPerOrder > 1000 {
			v.add(at("maxPerOrder"), "required, between 1 and 1000")
		}
		rows[i] = r
	}
	if err := v.err(); err != nil {
		return err
	}
	ctx := c.Request().Context()
	seller := mustPrincipal(c).SellerID
	results := make([]skuResult, len(rows))
	err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if ok, err := inventory.SellerExists(ctx, tx, seller); err != nil || !ok {
			if err == nil {
				err = forbidden("seller is not registered")
			}
			return err
		}
		for i, r := range rows {
			id, created, err := inventory.UpsertSKU(ctx, tx, inventory.SKU{SellerID: seller, Code: r.SKU, Title: r.Title,
				PriceMinor: prices[i], Currency: r.Currency, MaxPerOrder: *r.MaxPerOrder})
			if err != nil {
				return err
			}
			status := "UPDATED"
			if created {
				status = "CREATED"
			}
			results[i] = skuResult{SKU: r.SKU, SKUID: id, Status: status}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"results": results})
}

type stockRow struct {
	SKU             string `json:"sku"`
	SKUID           int64  `json:"skuId"`
	WarehouseID     *int32 `json:"warehouseId"`
	Quantity        *int64 `json:"quantity"`
	SourceUpdatedAt string `json:"sourceUpdatedAt"`
}

type stockResult struct {
	SKU                   string `json:"sku,omitempty"`
	SKUID                 int64  `json:"skuId"`
	WarehouseID           int32  `json:"warehouseId"`
	Status                string `json:"status"`
	CancelledReservations int    `json:"cancelledReservations"`
}

// putStocks applies a seller's absolute stock counts. The whole batch is validated first (format,
// warehouses, and that every SKU is the seller's own); a rejected batch writes nothing. Rows are
// then applied one transaction each, so a long batch never holds many rows locked.
func (s *Server) putStocks(c echo.Context) error {
	var rows []stockRow
	if err := bind(c, &rows); err != nil {
		return err
	}
	if err := checkBatch(len(rows)); err != nil {
		return err
	}
	var v validation
	stamps := make([]time.Time, len(rows))
	now := time.Now()
	for i, r := range rows {
		at := func(f string) string { return fmt.Sprintf("[%d].%s", i, f) }
		rows[i].SKU = strings.TrimSpace(r.SKU)
		if rows[i].SKU == "" && r.SKUID <= 0 {
			v.add(at("sku"), "sku (your code) or skuId is required")
		}
		if r.WarehouseID == nil || *r.WarehouseID <= 0 {
			v.add(at("warehouseId"), "required, a warehouse id")
		}
		if r.Quantity == nil || *r.Quantity < 0 || *r.Quantity > 1_000_000_000 {
			v.add(at("quantity"), "required, between 0 and 1000000000")
		}
		ts, err := time.Parse(time.RFC3339Nano, r.SourceUpdatedAt)
		switch {
		case err != nil, ts.IsZero(): // the zero instant is the inventory engine's "not set"
			v.add(at("sourceUpdatedAt"), "required, an RFC 3339 time such as 2026-11-30T10:00:00Z")
		case ts.After(now.Add(MaxFutureSkew)):
			v.add(at("sourceUpdatedAt"), "lies in the future")
		}
		stamps[i] = ts
	}
	if err := v.err(); err != nil {
		return err
	}

	ctx := c.Request().Context()
	seller := mustPrincipal(c).SellerID
	skuIDs, err := s.resolveSellerSKUs(c, seller, rows)
	if err != nil {
		return err
	}
	whs := make([]int32, 0, len(rows))
	for _, r := range rows {
		whs = append(whs, *r.WarehouseID)
	}
	known, err := inventory.ExistingWarehouses(ctx, s.Pool, whs)
	if err != nil {
		return err
	}
	isKnown := map[int32]bool{}
	for _, id := range known {
		isKnown[id] = true
	}
	for i, r := range rows {
		if !isKnown[*r.WarehouseID] {
			v.add(fmt.Sprintf("[%d].warehouseId", i), fmt.Sprintf("unknown warehouse %d", *r.WarehouseID))
		}
	}
	if err := v.err(); err != nil {
		return err
	}

	results := make([]stockResult, len(rows))
	for i, r := range rows {
		res, err := s.Inventory.ApplySellerStock(ctx, seller, inventory.StockUpdate{SKUID: skuIDs[i],
			WarehouseID: *r.WarehouseID, Quantity: int32(*r.Quantity), SourceUpdatedAt: stamps[i]})
		if err != nil {
			return err
		}
		results[i] = stockResult{SKU: r.SKU, SKUID: skuIDs[i], WarehouseID: *r.WarehouseID,
			Status: res.Status, CancelledReservations: res.CancelledReservations}
		if res.Status == inventory.StockAppliedWithShortfall {
			s.Log.WarnContext(c.Request().Context(), "seller stock below reservations", "seller_id", seller, "sku_id", skuIDs[i],
				"warehouse_id", *r.WarehouseID, "cancelled_reservations", res.CancelledReservations,
				"order_ids", res.AffectedOrders)
		}
	}
	return c.JSON(http.StatusOK, map[string]any{"results": results})
}

// resolveSellerSKUs maps every row to a SKU id of this seller: an unknown code is 404
// SKU_NOT_FOUND, another seller's SKU id is 403; both name the rows.
func (s *Server) resolveSellerSKUs(c echo.Context, seller int64, rows []stockRow) ([]int64, error) {
	ctx := c.Request().Context()
	var codes []string
	var ids []int64
	for _, r := range rows {
		if r.SKU != "" {
			codes = append(codes, r.SKU)
		} else {
			ids = append(ids, r.SKUID)
		}
	}
	byCode := map[string]int64{}
	if len(codes) > 0 {
		var err error
		if byCode, err = inventory.SellerSKUs(ctx, s.Pool, seller, codes); err != nil {
			return nil, err
		}
	}
	owner := map[int64]int64{}
	if len(ids) > 0 {
		found, err := inventory.SKUs(ctx, s.Pool, ids)
		if err != nil {
			return nil, err
		}
		for _, f := range found {
			owner[f.ID] = f.SellerID
		}
	}
	out := make([]int64, len(rows))
	var missing, foreign []rowSKU
	for i, r := range rows {
		switch {
		case r.SKU != "":
			id, ok := byCode[r.SKU]
			if !ok {
				missing = append(missing, rowSKU{Row: i, SKU: r.SKU})
			} else if r.SKUID > 0 && r.SKUID != id {
				v := validation{}
				v.add(fmt.Sprintf("[%d].skuId", i), "does not match sku")
				return nil, v.err()
			}
			out[i] = id
		default:
			o, ok := owner[r.SKUID]
			switch {
			case !ok:
				missing = append(missing, rowSKU{Row: i, SKUID: r.SKUID})
			case o != seller:
				foreign = append(foreign, rowSKU{Row: i, SKUID: r.SKUID})
			}
			out[i] = r.SKUID
		}
	}
	if len(foreign) > 0 {
		return nil, forbidden("some SKUs belong to another seller").WithDetails(badRows{Rows: foreign})
	}
	if len(missing) > 0 {
		return nil, problem.New(problem.SKUNotFound, "some SKUs are not in your catalog").WithDetails(badRows{Rows: missing})
	}
	return out, nil
}

// badRows are the details of a batch refused for some of its rows: each row's index and SKU.
type badRows struct {
	Rows []rowSKU `json:"rows"`
}

// rowSKU is one row of a batch, by its index, and the SKU it names (by the seller's code or by id).
type rowSKU struct {
	Row   int    `json:"row"`
	SKU   string `json:"sku,omitempty"`
	SKUID int64  `json:"skuId,omitempty"`
}
