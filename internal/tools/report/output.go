package report

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"time"
)

// WriteJSON writes v, indented, to a new file at path.
func WriteJSON(path string, v any) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// WriteCSV writes rows to a new file at path.
func WriteCSV(path string, rows [][]string) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(file)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// Micros is d in microseconds, the unit of the latency tables.
func Micros(d time.Duration) float64 { return float64(d) / 1e3 }
