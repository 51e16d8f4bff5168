// Package nftable removes one nftables table by family and name: what the runner's filters
// (pkg/network/spoofguard, pkg/network/podnat) do before installing theirs, so a runner restarted in the same pod
// replaces its tables instead of adding a second copy.
package nftable

import (
	"fmt"

	"github.com/google/nftables"
)

// Delete queues the deletion of the table on c, if it exists; c.Flush applies it.
func Delete(c *nftables.Conn, family nftables.TableFamily, name string) error {
	tables, err := c.ListTablesOfFamily(family)
	if err != nil {
		return fmt.Errorf("list nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == name {
			c.DelTable(t)
		}
	}
	return nil
}

// Remove deletes the table now, if it exists.
func Remove(family nftables.TableFamily, name string) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if err := Delete(c, family, name); err != nil {
		return err
	}
	return c.Flush()
}
