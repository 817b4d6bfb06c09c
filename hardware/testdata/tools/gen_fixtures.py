import json
def idctrl(vid, ssvid, sn, mn, fr, cntlid, ver, oacs, frmw, lpa, fna, sanicap, tnvmcap, nn, wctemp, cctemp):
    return dict(vid=vid, ssvid=ssvid, sn=sn.ljust(20), mn=mn.ljust(40), fr=fr.ljust(8), rab=2, ieee=9528, cmic=0, mdts=9,
             cntlid=cntlid, ver=ver, rtd3r=8000000, rtd3e=8000000, oaes=768, ctratt=128, rrls=0, cntrltype=1,
             fguid="00000000-0000-0000-0000-000000000000", crdt1=0, crdt2=0, crdt3=0, nvmsr=1, vwci=0, mec=1,
             oacs=oacs, acl=7, aerl=3, frmw=frmw, lpa=lpa, elpe=63, npss=0, avscc=1, apsta=0, wctemp=wctemp, cctemp=cctemp,
             mtfa=130, hmpre=0, hmmin=0, tnvmcap=tnvmcap, unvmcap=0, rpmbs=0, edstt=35, dsto=1, fwug=0, kas=0,
             hctma=0, mntmt=0, mxtmt=0, sanicap=sanicap, hmminds=0, hmmaxd=0, nsetidmax=0, endgidmax=1, anatt=0,
             anacap=0, anagrpmax=0, nanagrpid=0, pels=0, domainid=0, megcap=0, sqes=102, cqes=68, maxcmd=0, nn=nn,
             oncs=95, fuses=0, fna=fna, vwc=6, awun=255, awupf=0, icsvscc=0, nwpc=0, acwu=0, ocfs=0, sgls=458753,
             mnan=0, maxdna=0, maxcna=0, subnqn="nqn.1994-11.com.vendor:nvme:%s:%s" % (mn.replace(" ", "_"), sn),
             ioccsz=0, iorcsz=0, icdoff=0, fcatt=0, msdbd=0, ofcs=0,
             psds=[{"max_power":2500,"max_power_scale":0,"non-operational_state":0,"entry_lat":0,"exit_lat":0,"read_tput":0,"read_lat":0,"write_tput":0,"write_lat":0,"idle_power":0,"idle_scale":0,"active_power":0,"active_power_work":0,"active_scale":0}])
files = {
 "id-ctrl-samsung-pm9a3.json": idctrl(5197, 5197, "S64GNE0R600123", "SAMSUNG MZQL23T8HCLS-00A07", "GDC5602Q", 6, 66560, 95, 23, 30, 4, 1610612739, 3840755982336, 32, 353, 356),
 "id-ctrl-kioxia-cm6.json": idctrl(7695, 7695, "71D0A03FT1JE", "KIOXIA KCM6XRUL3T84", "0106", 1, 66560, 94, 7, 14, 0, 6, 3840755982336, 16, 348, 358),
 "id-ctrl-solidigm-p5510.json": idctrl(32902, 32902, "PHAB123400AB3P8CGN", "INTEL SSDPF2KX038TZ", "JCV10200", 0, 66560, 14, 24, 14, 4, 1610612739, 3840755982336, 128, 343, 353),
 "id-ctrl-consumer-nosanitize.json": idctrl(5197, 5197, "S4EWNX0R123456", "Samsung SSD 970 EVO Plus 1TB", "2B2QEXM7", 4, 66304, 23, 22, 15, 0, 0, 1000204886016, 1, 358, 358),
}
for n, d in files.items():
    open(n, "w").write(json.dumps(d, indent=2) + "\n")
def smart(cw, temp, spare, thresh, used, dur, duw, poh, cw_obj=False):
    return {"critical_warning": {"value": cw, "available_spare": 1 if cw & 1 else 0, "temp_threshold": 0, "reliability_degraded": 1 if cw & 4 else 0, "ro": 0, "vmbu_failed": 0, "pmr_ro": 0} if cw_obj else cw,
         "temperature": temp, "avail_spare": spare, "spare_thresh": thresh, "percent_used": used,
         "endurance_grp_critical_warning_summary": 0, "data_units_read": dur, "data_units_written": duw,
         "host_read_commands": dur*9, "host_write_commands": duw*7, "controller_busy_time": 1234, "power_cycles": 41,
         "power_on_hours": poh, "unsafe_shutdowns": 12, "media_errors": 0, "num_err_log_entries": 3,
         "warning_temp_time": 0, "critical_comp_time": 0, "temperature_sensor_1": temp, "temperature_sensor_2": temp+4,
         "thm_temp1_trans_count": 0, "thm_temp2_trans_count": 0, "thm_temp1_total_time": 0, "thm_temp2_total_time": 0}
open("smart-log-samsung-pm9a3.json","w").write(json.dumps(smart(0, 310, 100, 10, 3, 98765432, 123456789, 8712), indent=2)+"\n")
open("smart-log-kioxia-cm6-worn.json","w").write(json.dumps(smart(5, 318, 8, 10, 104, 998765432, 1923456789, 39012), indent=2)+"\n")
open("smart-log-newer-nvme-cli.json","w").write(json.dumps(smart(1, 305, 5, 10, 42, 1000, 2000, 100, cw_obj=True), indent=2)+"\n")
def san(dev, sprog, code, text, erased=0, passes=0, cdw10=0):
    return {dev: {"sprog": sprog, "sstat": {"global_erased": erased, "no_cmplted_passes": passes, "status": "(%d) %s" % (code, text)},
            "cdw10_info": cdw10, "time_over_write": 4294967295, "time_block_erase": 4294967295, "time_crypto_erase": 4294967295,
            "time_over_write_no_dealloc": 4294967295, "time_block_erase_no_dealloc": 4294967295, "time_crypto_erase_no_dealloc": 4294967295}}
open("sanitize-log-never.json","w").write(json.dumps(san("nvme0", 65535, 0, "NVM subsystem has never been sanitized."), indent=2)+"\n")
open("sanitize-log-progress.json","w").write(json.dumps(san("nvme0", 32768, 2, "A sanitize operation is currently in progress."), indent=2)+"\n")
# cdw10_info: CDW10 of the sanitize that is running, SANACT in bits 2:0 (2 block, 4 crypto).
open("sanitize-log-progress-block.json","w").write(json.dumps(san("nvme0", 16384, 2, "A sanitize operation is currently in progress.", cdw10=2), indent=2)+"\n")
open("sanitize-log-progress-crypto.json","w").write(json.dumps(san("nvme0", 16384, 2, "A sanitize operation is currently in progress.", cdw10=4), indent=2)+"\n")
open("sanitize-log-done.json","w").write(json.dumps(san("nvme0", 65535, 1, "The most recent sanitize operation completed successfully including any additional media modification.", 1, 1), indent=2)+"\n")
open("sanitize-log-failed.json","w").write(json.dumps(san("nvme0", 65535, 3, "The most recent sanitize operation failed."), indent=2)+"\n")
lst = {"Devices": [{"HostNQN": "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0031-3510-8052-b3c04f4e3133", "HostID": "4c4c4544-0031-3510-8052-b3c04f4e3133",
  "Subsystems": [
   {"Subsystem": "nvme-subsys0", "SubsystemNQN": "nqn.1994-11.com.samsung:nvme:PM9A3:2.5-inch:S64GNE0R600123",
    "Controllers": [{"Controller": "nvme0", "Cntlid": "6", "SerialNumber": "S64GNE0R600123      ", "ModelNumber": "SAMSUNG MZQL23T8HCLS-00A07              ",
      "Firmware": "GDC5602Q", "Transport": "pcie", "Address": "0000:01:00.0", "Slot": "",
      "Namespaces": [{"NameSpace": "nvme0n1", "Generic": "ng0n1", "NSID": 1, "UsedBytes": 81920000000, "MaximumLBA": 7501476528, "PhysicalSize": 3840755982336, "SectorSize": 512}],
      "Paths": []}],
    "Namespaces": []},
   {"Subsystem": "nvme-subsys1", "SubsystemNQN": "nqn.2019-10.com.kioxia:KCM6XRUL3T84:71D0A03FT1JE",
    "Controllers": [{"Controller": "nvme1", "Cntlid": "1", "SerialNumber": "71D0A03FT1JE        ", "ModelNumber": "KIOXIA KCM6XRUL3T84                     ",
      "Firmware": "0106    ", "Transport": "pcie", "Address": "0000:81:00.0", "Slot": "",
      "Namespaces": [{"NameSpace": "nvme1n1", "Generic": "ng1n1", "NSID": 1, "UsedBytes": 1920383410176, "MaximumLBA": 3750748848, "PhysicalSize": 1920383410176, "SectorSize": 512}],
      "Paths": [{"Path": "nvme1c1n2", "ANAState": "optimized"}]}],
    "Namespaces": [{"NameSpace": "nvme1n2", "Generic": "ng1n2", "NSID": 2, "UsedBytes": 0, "MaximumLBA": 3750748848, "PhysicalSize": 1920383410176, "SectorSize": 512}]},
   {"Subsystem": "nvme-subsys2", "SubsystemNQN": "nqn.2014-08.org.nvmexpress:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6",
    "Controllers": [{"Controller": "nvme2", "Cntlid": "1", "SerialNumber": "fabrics-remote", "ModelNumber": "Linux", "Firmware": "6.1.0",
      "Transport": "tcp", "Address": "traddr=10.0.0.5,trsvcid=4420", "Slot": "", "Namespaces": [], "Paths": []}],
    "Namespaces": []}]}]}
open("nvme-list-v.json","w").write(json.dumps(lst, indent=2)+"\n")
# A dual-port drive with both ports on this host: one NVM subsystem, two
# controllers, native multipath. Namespace 1 is attached to nvme0 only (its
# path node nvme0c0n1); nvme1 has none. nvme-cli still lists the head
# nvme0n1 at the subsystem level, beside both controllers.
dual = {"Devices": [{"HostNQN": "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0031-3510-8052-b3c04f4e3133", "HostID": "4c4c4544-0031-3510-8052-b3c04f4e3133",
  "Subsystems": [
   {"Subsystem": "nvme-subsys0", "SubsystemNQN": "nqn.2019-10.com.kioxia:KCM6XRUL3T84:71D0A03FT1JF",
    "Controllers": [
     {"Controller": "nvme0", "Cntlid": "1", "SerialNumber": "71D0A03FT1JF        ", "ModelNumber": "KIOXIA KCM6XRUL3T84                     ",
      "Firmware": "0106    ", "Transport": "pcie", "Address": "0000:01:00.0", "Slot": "", "Namespaces": [],
      "Paths": [{"Path": "nvme0c0n1", "ANAState": "optimized"}]},
     {"Controller": "nvme1", "Cntlid": "2", "SerialNumber": "71D0A03FT1JF        ", "ModelNumber": "KIOXIA KCM6XRUL3T84                     ",
      "Firmware": "0106    ", "Transport": "pcie", "Address": "0000:81:00.0", "Slot": "", "Namespaces": [], "Paths": []}],
    "Namespaces": [{"NameSpace": "nvme0n1", "Generic": "ng0n1", "NSID": 1, "UsedBytes": 1920383410176, "MaximumLBA": 3750748848, "PhysicalSize": 1920383410176, "SectorSize": 512}]}]}]}
open("nvme-list-v-two-controllers.json","w").write(json.dumps(dual, indent=2)+"\n")
