package main

import (
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"

	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

func runDevices(args []string) error {
	fs := flag.NewFlagSet("ibv_devices", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	devs, err := verbs.Devices()
	if err != nil {
		return err
	}
	fmt.Printf("    %-16s\t    node GUID\n", "device")
	fmt.Printf("    %-16s\t----------------\n", "------")
	for _, d := range devs {
		fmt.Printf("    %-16s\t%016x\n", d.Name(), d.GUID())
	}
	return nil
}

func runDevinfo(args []string) error {
	fs := flag.NewFlagSet("ibv_devinfo", flag.ContinueOnError)
	dev := fs.String("d", "", "show only this device (default: all)")
	addr := fs.String("addr", "", "open a device on this IP address instead of listing interfaces")
	verbose := fs.Bool("v", false, "print all attributes")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var ctxs []verbs.Context
	if *addr != "" {
		a, err := netip.ParseAddr(*addr)
		if err != nil {
			return fmt.Errorf("-addr %q: %v", *addr, err)
		}
		d, err := soft.Open(soft.Config{Addr: a})
		if err != nil {
			return err
		}
		ctxs = append(ctxs, d)
	} else {
		devs, err := verbs.Devices()
		if err != nil {
			return err
		}
		for _, d := range devs {
			if *dev != "" && d.Name() != *dev {
				continue
			}
			c, err := d.Open()
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", d.Name(), err)
				continue
			}
			ctxs = append(ctxs, c)
		}
		if len(ctxs) == 0 && *dev != "" {
			return fmt.Errorf("no device %q", *dev)
		}
	}
	for _, c := range ctxs {
		printDevinfo(os.Stdout, c, *verbose)
		c.Close()
	}
	return nil
}

func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// printDevinfo prints a device the way ibv_devinfo (-v) does.
func printDevinfo(w io.Writer, c verbs.Context, verbose bool) {
	a, _ := c.QueryDevice()
	fmt.Fprintf(w, "hca_id:\t%s\n", c.Device().Name())
	fmt.Fprintf(w, "\ttransport:\t\t\tInfiniBand (0)\n")
	fmt.Fprintf(w, "\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	fmt.Fprintf(w, "\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	fmt.Fprintf(w, "\tsys_image_guid:\t\t\t%s\n", guidString(a.SysImageGUID))
	fmt.Fprintf(w, "\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	fmt.Fprintf(w, "\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	fmt.Fprintf(w, "\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	fmt.Fprintf(w, "\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		rows := []struct {
			k string
			v any
		}{
			{"max_mr_size", fmt.Sprintf("0x%x", a.MaxMRSize)}, {"page_size_cap", fmt.Sprintf("0x%x", a.PageSizeCap)},
			{"max_qp", a.MaxQP}, {"max_qp_wr", a.MaxQPWR}, {"device_cap_flags", fmt.Sprintf("0x%08x", a.DeviceCapFlags)},
			{"max_sge", a.MaxSGE}, {"max_sge_rd", a.MaxSGERd}, {"max_cq", a.MaxCQ}, {"max_cqe", a.MaxCQE},
			{"max_mr", a.MaxMR}, {"max_pd", a.MaxPD}, {"max_qp_rd_atom", a.MaxQPRdAtom}, {"max_ee_rd_atom", a.MaxEECRdAtom},
			{"max_res_rd_atom", a.MaxResRdAtom}, {"max_qp_init_rd_atom", a.MaxQPInitRdAtom}, {"max_ee_init_rd_atom", a.MaxEEInitRdAtom},
			{"atomic_cap", fmt.Sprintf("%v (%d)", a.AtomicCap, a.AtomicCap)}, {"max_ee", a.MaxEE}, {"max_rdd", a.MaxRDD},
			{"max_mw", a.MaxMW}, {"max_raw_ipv6_qp", a.MaxRawIPv6QP}, {"max_raw_ethy_qp", a.MaxRawEthyQP},
			{"max_mcast_grp", a.MaxMcastGrp}, {"max_mcast_qp_attach", a.MaxMcastQPAttach},
			{"max_total_mcast_qp_attach", a.MaxTotalMcastQPAttach}, {"max_ah", a.MaxAH}, {"max_fmr", a.MaxFMR},
			{"max_srq", a.MaxSRQ}, {"max_srq_wr", a.MaxSRQWR}, {"max_srq_sge", a.MaxSRQSGE},
			{"max_pkeys", a.MaxPKeys}, {"local_ca_ack_delay", a.LocalCADelayAck},
		}
		for _, r := range rows {
			tabs := "\t\t\t"
			if len(r.k) >= 15 {
				tabs = "\t\t"
			}
			if len(r.k) >= 23 {
				tabs = "\t"
			}
			fmt.Fprintf(w, "\t%s:%s%v\n", r.k, tabs, r.v)
		}
	}
	for port := uint8(1); port <= a.PhysPortCnt; port++ {
		p, err := c.QueryPort(port)
		if err != nil {
			continue
		}
		fmt.Fprintf(w, "\t\tport:\t%d\n", port)
		fmt.Fprintf(w, "\t\t\tstate:\t\t\t%v (%d)\n", p.State, p.State)
		fmt.Fprintf(w, "\t\t\tmax_mtu:\t\t%v (%d)\n", p.MaxMTU, p.MaxMTU)
		fmt.Fprintf(w, "\t\t\tactive_mtu:\t\t%v (%d)\n", p.ActiveMTU, p.ActiveMTU)
		fmt.Fprintf(w, "\t\t\tsm_lid:\t\t\t%d\n", p.SMLID)
		fmt.Fprintf(w, "\t\t\tport_lid:\t\t%d\n", p.LID)
		fmt.Fprintf(w, "\t\t\tport_lmc:\t\t0x%02x\n", p.LMC)
		fmt.Fprintf(w, "\t\t\tlink_layer:\t\t%v\n", p.LinkLayer)
		if verbose {
			fmt.Fprintf(w, "\t\t\tmax_msg_sz:\t\t0x%x\n", p.MaxMsgSz)
			fmt.Fprintf(w, "\t\t\tport_cap_flags:\t\t0x%08x\n", p.PortCapFlags)
			fmt.Fprintf(w, "\t\t\tmax_vl_num:\t\tinvalid value (%d)\n", p.MaxVLNum)
			fmt.Fprintf(w, "\t\t\tbad_pkey_cntr:\t\t0x%x\n", p.BadPKeyCntr)
			fmt.Fprintf(w, "\t\t\tqkey_viol_cntr:\t\t0x%x\n", p.QKeyViolCntr)
			fmt.Fprintf(w, "\t\t\tsm_sl:\t\t\t%d\n", p.SMSL)
			fmt.Fprintf(w, "\t\t\tpkey_tbl_len:\t\t%d\n", p.PKeyTblLen)
			fmt.Fprintf(w, "\t\t\tgid_tbl_len:\t\t%d\n", p.GIDTblLen)
			fmt.Fprintf(w, "\t\t\tsubnet_timeout:\t\t%d\n", p.SubnetTimeout)
			fmt.Fprintf(w, "\t\t\tinit_type_reply:\t%d\n", p.InitTypeReply)
			fmt.Fprintf(w, "\t\t\tactive_width:\t\t4X (%d)\n", p.ActiveWidth)
			fmt.Fprintf(w, "\t\t\tactive_speed:\t\t25.0 Gbps (%d)\n", p.ActiveSpeed)
			fmt.Fprintf(w, "\t\t\tphys_state:\t\tLINK_UP (%d)\n", p.PhysState)
			for i := 0; i < p.GIDTblLen; i++ {
				g, err := c.QueryGID(port, i)
				if err != nil {
					continue
				}
				v := "v2"
				fmt.Fprintf(w, "\t\t\tGID[%3d]:\t\t%s, RoCE %s\n", i, gidHex(g), v)
			}
		}
		fmt.Fprintln(w)
	}
}

// gidHex formats a GID as ibv_devinfo does: eight groups of four hex digits.
func gidHex(g verbs.GID) string {
	s := ""
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			s += ":"
		}
		s += fmt.Sprintf("%02x%02x", g[i], g[i+1])
	}
	return s
}
