// Package demo loads the local stack's demo data: three warehouses, two sellers, twenty SKUs with
// prices and stock, and two shoppers with addresses. Loading twice changes nothing, so a second
// `make run` keeps whatever the first one sold.
package demo

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Warehouse of the demo.
type Warehouse struct {
	ID         int32
	Code, City string
	Lat, Lon   float64
}

// Warehouses: Istanbul, Ankara, Izmir.
var Warehouses = []Warehouse{
	{1, "IST", "Istanbul", 41.0082, 28.9784},
	{2, "ANK", "Ankara", 39.9334, 32.8597},
	{3, "IZM", "Izmir", 38.4237, 27.1428},
}

// Sellers of the demo.
var Sellers = map[int64]string{42: "Anadolu Elektronik", 43: "Ege Ev ve Yaşam"}

// SKU of the demo, with stock per warehouse.
type SKU struct {
	ID          int64
	SellerID    int64
	Title       string
	PriceMinor  int64
	MaxPerOrder int32
	Stock       map[int32]int32
}

// SKUs: ids 71–90, codes "S-<id>". 77 is a campaign SKU with stock in every warehouse; 81 has a
// single unit left.
var SKUs = []SKU{
	{71, 42, "Kablosuz kulaklık", 1_249_90, 5, map[int32]int32{1: 40, 2: 25, 3: 15}},
	{72, 42, "Akıllı saat", 3_499_00, 3, map[int32]int32{1: 20, 2: 10}},
	{73, 42, "Bluetooth hoparlör", 899_90, 5, map[int32]int32{1: 30, 3: 20}},
	{74, 42, "USB-C şarj aleti 65W", 549_90, 10, map[int32]int32{1: 100, 2: 80, 3: 60}},
	{75, 42, "Powerbank 20000 mAh", 749_00, 5, map[int32]int32{2: 35}},
	{76, 42, "Mekanik klavye", 1_899_00, 2, map[int32]int32{1: 12}},
	{77, 42, "Kampanya: oyun konsolu", 19_999_00, 1, map[int32]int32{1: 100, 2: 50, 3: 50}},
	{78, 42, "Kablosuz mouse", 399_90, 5, map[int32]int32{1: 60, 2: 40, 3: 30}},
	{79, 42, "27 inç monitör", 6_499_00, 2, map[int32]int32{1: 8, 3: 4}},
	{80, 42, "Web kamerası", 1_099_00, 3, map[int32]int32{2: 15}},
	{81, 42, "Son ürün: retro radyo", 1_499_90, 1, map[int32]int32{3: 1}},
	{82, 43, "Türk kahvesi makinesi", 2_199_00, 2, map[int32]int32{1: 25, 2: 10, 3: 10}},
	{83, 43, "Çay makinesi", 1_799_00, 2, map[int32]int32{1: 30, 2: 20}},
	{84, 43, "Nevresim takımı", 899_00, 4, map[int32]int32{3: 40}},
	{85, 43, "Bornoz", 649_90, 4, map[int32]int32{1: 15, 3: 25}},
	{86, 43, "Döküm tencere", 2_799_00, 2, map[int32]int32{2: 6}},
	{87, 43, "Bıçak seti", 1_299_00, 3, map[int32]int32{1: 18, 2: 9, 3: 9}},
	{88, 43, "Seramik kupa (6'lı)", 449_90, 6, map[int32]int32{1: 50, 2: 50, 3: 50}},
	{89, 43, "Masa lambası", 999_00, 3, map[int32]int32{1: 3, 2: 2}},
	{90, 43, "Halı 160x230", 4_299_00, 1, map[int32]int32{3: 5}},
}

// Address of a demo shopper.
type Address struct {
	UserID      int64
	City, Line1 string
	Lat, Lon    float64
}

// Shoppers 7 (Istanbul, plus a second address in Izmir) and 8 (Ankara).
var Addresses = []Address{
	{7, "Istanbul", "Bağdat Caddesi 120, Kadıköy", 40.9780, 29.0630},
	{7, "Izmir", "Kordon Boyu 15, Alsancak", 38.4380, 27.1430},
	{8, "Ankara", "Atatürk Bulvarı 200, Çankaya", 39.9100, 32.8540},
}

// Load writes the demo data where it is missing, in one transaction. The demo is the harness's: it
// writes the areas' tables with plain SQL, as an operator would, and through no area's store.
func Load(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, w := range Warehouses {
			if _, err := tx.Exec(ctx, `INSERT INTO warehouses (id, code, name, city, lat, lon)
				VALUES ($1, $2, $3, $4, $5, $6)
				ON CONFLICT (id) DO UPDATE SET code = EXCLUDED.code, name = EXCLUDED.name, city = EXCLUDED.city,
				    lat = EXCLUDED.lat, lon = EXCLUDED.lon`,
				w.ID, w.Code, w.City+" warehouse", w.City, w.Lat, w.Lon); err != nil {
				return err
			}
		}
		for id, name := range Sellers {
			if _, err := tx.Exec(ctx, `INSERT INTO sellers (id, name) VALUES ($1, $2)
				ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name`, id, name); err != nil {
				return err
			}
		}
		for _, s := range SKUs {
			// Fixed ids, so that examples in the documentation stay true.
			if _, err := tx.Exec(ctx, `INSERT INTO skus (id, seller_id, code, title, price_minor, currency, max_per_order)
				VALUES ($1, $2, $3, $4, $5, 'TRY', $6) ON CONFLICT (id) DO NOTHING`,
				s.ID, s.SellerID, fmt.Sprintf("S-%d", s.ID), s.Title, s.PriceMinor, s.MaxPerOrder); err != nil {
				return err
			}
			for wh, n := range s.Stock {
				if _, err := tx.Exec(ctx, `INSERT INTO inventory (sku_id, warehouse_id, on_hand, reported_quantity)
					VALUES ($1, $2, $3, $3) ON CONFLICT (sku_id, warehouse_id) DO NOTHING`, s.ID, wh, n); err != nil {
					return err
				}
			}
		}
		users := map[int64]bool{}
		for _, a := range Addresses {
			if _, seen := users[a.UserID]; !seen {
				var n int64
				if err := tx.QueryRow(ctx, `SELECT count(*) FROM addresses WHERE user_id = $1`, a.UserID).Scan(&n); err != nil {
					return err
				}
				users[a.UserID] = n == 0
			}
			if !users[a.UserID] {
				continue
			}
			if _, err := tx.Exec(ctx, `INSERT INTO addresses (user_id, city, line1, lat, lon) VALUES ($1, $2, $3, $4, $5)`,
				a.UserID, a.City, a.Line1, a.Lat, a.Lon); err != nil {
				return err
			}
		}
		return nil
	})
}
