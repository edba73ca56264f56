// Package devinfo is ibv_devices and ibv_devinfo, as rdma-core 44's
// libibverbs/examples device_list.c and devinfo.c print them: the same
// options (getopt_long's -d/--ib-dev, -i/--ib-port, -l/--list,
// -v/--verbose), the same lines, the same tabs, the same exit statuses, so
// scripts that read rdma-core's output read softrdma's.
package devinfo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	"github.com/softrdma/softrdma/internal/getopt"
	"github.com/softrdma/softrdma/provider/soft"
	"github.com/softrdma/softrdma/verbs"
)

// errDevinfoUsage is a bad command line: the usage was printed.
var errDevinfoUsage = errors.New("invalid command line")

// Run runs ibv_devices or ibv_devinfo, as args[0] names, with the
// command line args[1:]. A failure that rdma-core's ibv_devinfo reports
// with an exit status other than 1 is an error with an ExitStatus method
// (255 for a bad command line, whose complaint and usage are already
// printed, and an empty message).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "ibv_devices" {
		return runDevices(stdout)
	}
	return runDevinfo(args[min(1, len(args)):], stdout, stderr)
}

// runDevices is ibv_devices, which takes no options and ignores its
// arguments, as rdma-core's does.
func runDevices(stdout io.Writer) error {
	devs, err := verbs.Devices()
	if err != nil {
		return fmt.Errorf("Failed to get IB devices list: %w", err)
	}
	writeDevices(stdout, devs)
	return nil
}

func writeDevices(w io.Writer, devs []verbs.Device) {
	fmt.Fprintf(w, "    %-16s\t   node GUID\n", "device")
	fmt.Fprintf(w, "    %-16s\t----------------\n", "------")
	for _, d := range devs {
		fmt.Fprintf(w, "    %-16s\t%016x\n", d.Name(), d.GUID())
	}
}

// devinfoOptions is ibv_devinfo's command line.
type devinfoOptions struct {
	dev     string // -d
	port    int    // -i; 0 means all ports
	list    bool   // -l
	verbose bool   // -v
	addr    string // --addr, softrdma's (not in the usage, which is rdma-core's): a device on this IP address
}

// parseDevinfoArgs parses as getopt_long("d:i:lv") does (internal/getopt).
// Like rdma-core, -l acts where it appears (what follows it is not looked
// at) and operands are ignored. getopt's complaints go to errw.
func parseDevinfoArgs(args []string, usage, errw io.Writer) (*devinfoOptions, error) {
	o := &devinfoOptions{}
	port := func(val string) error {
		v, err := strconv.ParseInt(val, 0, 64)
		if err != nil || v <= 0 || v > 255 {
			// strtol stops at the first non-digit: "1x" is 1.
			n := leadingInt(val)
			if n <= 0 || n > 255 {
				return errDevinfoUsage
			}
			v = int64(n)
		}
		o.port = int(v)
		return nil
	}
	table := []getopt.Option{
		{Short: 'd', Long: "ib-dev", HasArg: true, Set: getopt.String(&o.dev)},
		{Short: 'i', Long: "ib-port", HasArg: true, Set: port},
		{Short: 'l', Long: "list", Set: func(string) error { o.list = true; return getopt.ErrStop }},
		{Short: 'v', Long: "verbose", Set: getopt.Flag(&o.verbose)},
		{Long: "addr", HasArg: true, Set: getopt.String(&o.addr)},
	}
	if _, err := getopt.Parse(table, args); err != nil {
		var ge *getopt.Error
		if errors.As(err, &ge) {
			fmt.Fprintf(errw, "ibv_devinfo: %s\n", ge.Msg)
		}
		devinfoUsage(usage)
		return nil, errDevinfoUsage
	}
	return o, nil
}

// leadingInt is strtol(s, NULL, 0) for decimal input: the number its
// leading digits spell, 0 if none.
func leadingInt(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' || n > 1<<20 {
			break
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func devinfoUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s             print the ca attributes\n", "ibv_devinfo")
	fmt.Fprintf(w, "\n")
	fmt.Fprintf(w, "Options:\n")
	fmt.Fprintf(w, "  -d, --ib-dev=<dev>     use IB device <dev> (default first device found)\n")
	fmt.Fprintf(w, "  -i, --ib-port=<port>   use port <port> of IB device (default all ports)\n")
	fmt.Fprintf(w, "  -l, --list             print only the IB devices names\n")
	fmt.Fprintf(w, "  -v, --verbose          print all the attributes of the IB device(s)\n")
}

// devinfoError is a failure with the exit status rdma-core's ibv_devinfo
// returns for it: 255 (its -1) for a bad command line, an unknown -d or no
// device, 4 for a port the device does not have, 1 when a device does not
// open.
type devinfoError struct {
	status int
	msg    string
}

func (e *devinfoError) Error() string { return e.msg }

// ExitStatus is the status ibv_devinfo exits with.
func (e *devinfoError) ExitStatus() int { return e.status }

// runDevinfo is ibv_devinfo. Its errors are printed as rdma-core prints
// them, without the command's name, and carry rdma-core's exit status.
func runDevinfo(args []string, stdout, stderr io.Writer) error {
	o, err := parseDevinfoArgs(args, stdout, stderr)
	if err != nil {
		return &devinfoError{status: 255}
	}
	return devinfo(stdout, stderr, o)
}

func devinfo(w, errw io.Writer, o *devinfoOptions) error {
	if o.addr != "" {
		a, err := netip.ParseAddr(o.addr)
		if err != nil {
			return fmt.Errorf("--addr %q: %v", o.addr, err)
		}
		c, err := soft.Open(soft.Config{Addr: a})
		if err != nil {
			return err
		}
		defer c.Close()
		return printDevinfo(w, c, o.port, o.verbose)
	}
	devs, err := verbs.Devices()
	if err != nil {
		return fmt.Errorf("Failed to get IB devices list: %w", err)
	}
	if o.list {
		s := "s"
		if len(devs) == 1 {
			s = ""
		}
		fmt.Fprintf(w, "%d HCA%s found:\n", len(devs), s)
		for _, d := range devs {
			fmt.Fprintf(w, "\t%s\n", d.Name())
		}
		fmt.Fprintf(w, "\n")
		return nil
	}
	if o.dev != "" {
		for _, d := range devs {
			if d.Name() == o.dev {
				return devinfoOne(w, d, o)
			}
		}
		return &devinfoError{255, fmt.Sprintf("IB device '%s' wasn't found", o.dev)}
	}
	if len(devs) == 0 {
		return &devinfoError{255, "No IB devices found"}
	}
	// Every device is printed; the status is the OR of theirs.
	status := 0
	for _, d := range devs {
		if err := devinfoOne(w, d, o); err != nil {
			var de *devinfoError
			if !errors.As(err, &de) {
				return err
			}
			fmt.Fprintln(errw, de.msg)
			status |= de.status
		}
	}
	if status != 0 {
		return &devinfoError{status: status}
	}
	return nil
}

func devinfoOne(w io.Writer, d verbs.Device, o *devinfoOptions) error {
	c, err := d.Open()
	if err != nil {
		return &devinfoError{1, "Failed to open device: " + err.Error()}
	}
	defer c.Close()
	return printDevinfo(w, c, o.port, o.verbose)
}

func guidString(g uint64) string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", g>>48, g>>32&0xffff, g>>16&0xffff, g&0xffff)
}

// deviceCapNames are ibv_device_cap_flags' bits in print_device_cap_flags'
// order.
var deviceCapNames = []struct {
	bit  uint32
	name string
}{
	{1 << 0, "RESIZE_MAX_WR"}, {1 << 1, "BAD_PKEY_CNTR"}, {1 << 2, "BAD_QKEY_CNTR"}, {1 << 3, "RAW_MULTI"},
	{1 << 4, "AUTO_PATH_MIG"}, {1 << 5, "CHANGE_PHY_PORT"}, {1 << 6, "UD_AV_PORT_ENFORCE"},
	{1 << 7, "CURR_QP_STATE_MOD"}, {1 << 8, "SHUTDOWN_PORT"}, {1 << 9, "INIT_TYPE"},
	{1 << 10, "PORT_ACTIVE_EVENT"}, {1 << 11, "SYS_IMAGE_GUID"}, {1 << 12, "RC_RNR_NAK_GEN"},
	{1 << 13, "SRQ_RESIZE"}, {1 << 14, "N_NOTIFY_CQ"}, {1 << 17, "MEM_WINDOW"}, {1 << 18, "UD_IP_CSUM"},
	{1 << 20, "XRC"}, {1 << 21, "MEM_MGT_EXTENSIONS"}, {1 << 23, "MEM_WINDOW_TYPE_2A"},
	{1 << 24, "MEM_WINDOW_TYPE_2B"}, {1 << 25, "RC_IP_CSUM"}, {1 << 26, "RAW_IP_CSUM"},
	{1 << 29, "MANAGED_FLOW_STEERING"},
}

// printDevinfo prints a device as print_hca_cap does: every port, or only
// port (1-based) if it is not 0.
func printDevinfo(w io.Writer, c verbs.Context, port int, verbose bool) error {
	a, err := c.QueryDevice()
	if err != nil {
		return fmt.Errorf("Failed to query device props: %w", err)
	}
	if port > int(a.PhysPortCnt) {
		return &devinfoError{4, "Invalid port requested for device"}
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("hca_id:\t%s\n", c.Device().Name())
	p("\ttransport:\t\t\t%s (%d)\n", "InfiniBand", 0)
	if a.FWVer != "" {
		p("\tfw_ver:\t\t\t\t%s\n", a.FWVer)
	}
	p("\tnode_guid:\t\t\t%s\n", guidString(a.NodeGUID))
	p("\tsys_image_guid:\t\t\t%s\n", guidString(a.SysImageGUID))
	p("\tvendor_id:\t\t\t0x%04x\n", a.VendorID)
	p("\tvendor_part_id:\t\t\t%d\n", a.VendorPartID)
	p("\thw_ver:\t\t\t\t0x%X\n", a.HWVer)
	p("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
	if verbose {
		p("\tmax_mr_size:\t\t\t0x%x\n", a.MaxMRSize)
		p("\tpage_size_cap:\t\t\t0x%x\n", a.PageSizeCap)
		p("\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
		p("\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
		flags := uint32(a.DeviceCapFlags)
		p("\tdevice_cap_flags:\t\t0x%08x\n", flags)
		known := uint32(0)
		for _, f := range deviceCapNames {
			known |= f.bit
			if flags&f.bit != 0 {
				p("\t\t\t\t\t%s\n", f.name)
			}
		}
		if flags&^known != 0 {
			p("\t\t\t\t\tUnknown flags: 0x%X\n", flags&^known)
		}
		p("\tmax_sge:\t\t\t%d\n", a.MaxSGE)
		p("\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
		p("\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
		p("\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
		p("\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
		p("\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
		p("\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
		p("\tmax_ee_rd_atom:\t\t\t%d\n", a.MaxEECRdAtom)
		p("\tmax_res_rd_atom:\t\t%d\n", a.MaxResRdAtom)
		p("\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
		p("\tmax_ee_init_rd_atom:\t\t%d\n", a.MaxEEInitRdAtom)
		p("\tatomic_cap:\t\t\t%s (%d)\n", atomicCapString(a.AtomicCap), a.AtomicCap)
		p("\tmax_ee:\t\t\t\t%d\n", a.MaxEE)
		p("\tmax_rdd:\t\t\t%d\n", a.MaxRDD)
		p("\tmax_mw:\t\t\t\t%d\n", a.MaxMW)
		p("\tmax_raw_ipv6_qp:\t\t%d\n", a.MaxRawIPv6QP)
		p("\tmax_raw_ethy_qp:\t\t%d\n", a.MaxRawEthyQP)
		p("\tmax_mcast_grp:\t\t\t%d\n", a.MaxMcastGrp)
		p("\tmax_mcast_qp_attach:\t\t%d\n", a.MaxMcastQPAttach)
		p("\tmax_total_mcast_qp_attach:\t%d\n", a.MaxTotalMcastQPAttach)
		p("\tmax_ah:\t\t\t\t%d\n", a.MaxAH)
		p("\tmax_fmr:\t\t\t%d\n", a.MaxFMR)
		if a.MaxFMR != 0 {
			p("\tmax_map_per_fmr:\t\t%d\n", a.MaxMapPerFMR)
		}
		p("\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		if a.MaxSRQ != 0 {
			p("\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
			p("\tmax_srq_sge:\t\t\t%d\n", a.MaxSRQSGE)
		}
		p("\tmax_pkeys:\t\t\t%d\n", a.MaxPKeys)
		p("\tlocal_ca_ack_delay:\t\t%d\n", a.LocalCADelayAck)
		// The extended attributes rxe reports as zero, and so does
		// softrdma: no ODP, no timestamps, no TSO/RSS/pacing/TM.
		p("\tgeneral_odp_caps:\n")
		for _, t := range []string{"rc", "uc", "ud", "xrc"} {
			p("\t%s_odp_caps:\n\t\t\t\t\tNO SUPPORT\n", t)
		}
		p("\tcompletion_timestamp_mask not supported\n")
		p("\tcore clock not supported\n")
		p("\tdevice_cap_flags_ex:\t\t0x%X\n", uint64(flags))
		p("\ttso_caps:\n\t\tmax_tso:\t\t\t0\n")
		p("\trss_caps:\n")
		p("\t\tmax_rwq_indirection_tables:\t\t\t0\n")
		p("\t\tmax_rwq_indirection_table_size:\t\t\t0\n")
		p("\t\trx_hash_function:\t\t\t\t0x0\n")
		p("\t\trx_hash_fields_mask:\t\t\t\t0x0\n")
		p("\tmax_wq_type_rq:\t\t\t0\n")
		p("\tpacket_pacing_caps:\n\t\tqp_rate_limit_min:\t0kbps\n\t\tqp_rate_limit_max:\t0kbps\n")
		p("\ttag matching not supported\n")
		p("\tnum_comp_vectors:\t\t%d\n", 1)
	}
	for pn := 1; pn <= int(a.PhysPortCnt); pn++ {
		if port != 0 && pn != port {
			continue
		}
		pa, err := c.QueryPort(uint8(pn))
		if err != nil {
			return fmt.Errorf("Failed to query port %d props: %w", pn, err)
		}
		p("\t\tport:\t%d\n", pn)
		p("\t\t\tstate:\t\t\t%s (%d)\n", portStateString(pa.State), pa.State)
		p("\t\t\tmax_mtu:\t\t%s (%d)\n", mtuString(pa.MaxMTU), pa.MaxMTU)
		p("\t\t\tactive_mtu:\t\t%s (%d)\n", mtuString(pa.ActiveMTU), pa.ActiveMTU)
		p("\t\t\tsm_lid:\t\t\t%d\n", pa.SMLID)
		p("\t\t\tport_lid:\t\t%d\n", pa.LID)
		p("\t\t\tport_lmc:\t\t0x%02x\n", pa.LMC)
		p("\t\t\tlink_layer:\t\t%s\n", linkLayerString(pa.LinkLayer))
		if verbose {
			p("\t\t\tmax_msg_sz:\t\t0x%x\n", pa.MaxMsgSz)
			p("\t\t\tport_cap_flags:\t\t0x%08x\n", pa.PortCapFlags)
			p("\t\t\tport_cap_flags2:\t0x%04x\n", 0)
			p("\t\t\tmax_vl_num:\t\t%s (%d)\n", vlString(pa.MaxVLNum), pa.MaxVLNum)
			p("\t\t\tbad_pkey_cntr:\t\t0x%x\n", pa.BadPKeyCntr)
			p("\t\t\tqkey_viol_cntr:\t\t0x%x\n", pa.QKeyViolCntr)
			p("\t\t\tsm_sl:\t\t\t%d\n", pa.SMSL)
			p("\t\t\tpkey_tbl_len:\t\t%d\n", pa.PKeyTblLen)
			p("\t\t\tgid_tbl_len:\t\t%d\n", pa.GIDTblLen)
			p("\t\t\tsubnet_timeout:\t\t%d\n", pa.SubnetTimeout)
			p("\t\t\tinit_type_reply:\t%d\n", pa.InitTypeReply)
			p("\t\t\tactive_width:\t\t%sX (%d)\n", widthString(pa.ActiveWidth), pa.ActiveWidth)
			p("\t\t\tactive_speed:\t\t%s (%d)\n", speedString(pa.ActiveSpeed), pa.ActiveSpeed)
			p("\t\t\tphys_state:\t\t%s (%d)\n", physStateString(pa.PhysState), pa.PhysState)
			for i := 0; i < pa.GIDTblLen; i++ {
				g, err := c.QueryGID(uint8(pn), i)
				if err != nil {
					return fmt.Errorf("Failed to query gid to port %d, index %d", pn, i)
				}
				if g.IsZero() {
					continue
				}
				// Every softrdma GID is RoCE v2, which devinfo prints
				// with inet_ntop.
				p("\t\t\tGID[%3d]:\t\t%s, RoCE v2\n", i, netip.AddrFrom16(g).String())
			}
		}
		p("\n")
	}
	return nil
}

func portStateString(s verbs.PortState) string {
	switch s {
	case verbs.PortDown, verbs.PortInit, verbs.PortArmed, verbs.PortActive:
		return s.String()
	}
	return "invalid state"
}

func mtuString(m verbs.MTU) string {
	if !m.Valid() {
		return "invalid MTU"
	}
	return m.String()
}

func linkLayerString(l verbs.LinkLayer) string {
	switch l {
	case verbs.LinkLayerUnspecified:
		return "Unspecified"
	case verbs.LinkLayerInfiniBand:
		return "InfiniBand"
	case verbs.LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

func atomicCapString(a verbs.AtomicCap) string {
	switch a {
	case verbs.AtomicNone:
		return "ATOMIC_NONE"
	case verbs.AtomicHCA:
		return "ATOMIC_HCA"
	case verbs.AtomicGlob:
		return "ATOMIC_GLOB"
	}
	return "invalid atomic capability"
}

func widthString(w uint8) string {
	switch w {
	case 1:
		return "1"
	case 2:
		return "4"
	case 4:
		return "8"
	case 8:
		return "12"
	case 16:
		return "2"
	}
	return "invalid width"
}

func speedString(s uint8) string {
	switch s {
	case 1:
		return "2.5 Gbps"
	case 2:
		return "5.0 Gbps"
	case 4, 8:
		return "10.0 Gbps"
	case 16:
		return "14.0 Gbps"
	case 32:
		return "25.0 Gbps"
	case 64:
		return "50.0 Gbps"
	case 128:
		return "100.0 Gbps"
	}
	return "invalid speed"
}

func vlString(v uint8) string {
	switch v {
	case 1:
		return "1"
	case 2:
		return "2"
	case 3:
		return "4"
	case 4:
		return "8"
	case 5:
		return "15"
	}
	return "invalid value"
}

func physStateString(s uint8) string {
	switch s {
	case 1:
		return "SLEEP"
	case 2:
		return "POLLING"
	case 3:
		return "DISABLED"
	case 4:
		return "PORT_CONFIGURATION TRAINNING"
	case 5:
		return "LINK_UP"
	case 6:
		return "LINK_ERROR_RECOVERY"
	case 7:
		return "PHY TEST"
	}
	return "invalid physical state"
}
